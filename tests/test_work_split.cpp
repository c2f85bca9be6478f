// test_work_split.cpp: the MPI work split, checked exhaustively on small sizes without MPI.
//
// For every (N, ranks, block) in a grid that includes 0, 1, primes and exact multiples: the shares
// tile [0, N) in rank order, each made of whole blocks (it starts at a block's edge), the active
// ranks are min(ranks, blocks) and their block counts differ by at most one.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "mpi/work_split.hpp"

using facegen::mpi::active_rank_count;
using facegen::mpi::ImageRange;
using facegen::mpi::WorkSplit;

TEST_CASE("work split: shares of whole blocks tile the images in rank order, balanced within one block") {
  const int64_t sizes[] = {0, 1, 2, 3, 5, 7, 10, 63, 64, 65, 100, 127, 1000, 5248};
  const int rank_counts[] = {1, 2, 3, 4, 5, 8};
  const int64_t blocks[] = {1, 3, 7, 64, 1024, 100000};
  for (int64_t n : sizes) {
    for (int ranks : rank_counts) {
      for (int64_t b : blocks) {
        CAPTURE(n);
        CAPTURE(ranks);
        CAPTURE(b);
        WorkSplit split(n, ranks, b);
        CHECK(split.blocks() == (n + b - 1) / b);
        CHECK(split.active_ranks() == std::max<int64_t>(1, std::min<int64_t>(ranks, split.blocks())));
        int64_t next = 0, fewest = INT64_MAX, most = 0;
        for (int r = 0; r < ranks; ++r) {
          const ImageRange share = split.share(r);
          if (r >= split.active_ranks()) {
            CHECK(share.empty());
            continue;
          }
          REQUIRE(share.begin == next);
          CHECK(share.begin % b == 0);
          CHECK((share.end == n || share.end % b == 0));
          const int64_t share_blocks = (share.size() + b - 1) / b;
          fewest = std::min(fewest, share_blocks);
          most = std::max(most, share_blocks);
          next = share.end;
        }
        CHECK(next == n);
        if (n > 0) CHECK(most - fewest <= 1);
      }
    }
  }
}

TEST_CASE("work split: N = 10^12 in blocks of one image costs nothing per block") {
  const int64_t n = 1000000000000;
  WorkSplit split(n, 7, 1);
  CHECK(split.share(0).begin == 0);
  CHECK(split.share(6).end == n);
  CHECK(split.share(3).begin == split.share(2).end);
}

TEST_CASE("active ranks: sit out until each rank has its minimum") {
  CHECK(active_rank_count(10, 4, 256) == 1);
  CHECK(active_rank_count(0, 4, 256) == 1);
  CHECK(active_rank_count(511, 4, 256) == 1);
  CHECK(active_rank_count(512, 4, 256) == 2);
  CHECK(active_rank_count(100000, 4, 256) == 4);
  CHECK(active_rank_count(3, 5, 1) == 3);  // never more ranks than images
  CHECK(active_rank_count(3, 5, 0) == 3);
  CHECK(active_rank_count(64, 5, 1) == 5);
  CHECK(active_rank_count(7, 2, 4) == 1);
  CHECK(active_rank_count(8, 2, 4) == 2);
}

