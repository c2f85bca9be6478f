// test_work_split.cpp: the MPI work split, checked exhaustively on small sizes without MPI.
//
// For every (N, ranks, images per round) in a grid that includes 0, 1, primes and exact multiples:
// rounds tile [0, N) in order; each round's slices are contiguous, in rank order, and tile the round;
// no slice exceeds the per-round bound; rank totals differ by at most one and add up to N.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "mpi/work_split.hpp"

using facegen::mpi::active_rank_count;
using facegen::mpi::ImageRange;
using facegen::mpi::WorkSplit;

TEST_CASE("work split: rounds and slices tile the images in order, balanced within one image") {
  const int64_t sizes[] = {0, 1, 2, 3, 5, 7, 10, 63, 64, 65, 100, 127, 1000, 5248};
  const int rank_counts[] = {1, 2, 3, 4, 5, 8};
  const int64_t per_round[] = {1, 3, 7, 64, 1024};
  for (int64_t n : sizes) {
    for (int ranks : rank_counts) {
      for (int64_t c : per_round) {
        CAPTURE(n);
        CAPTURE(ranks);
        CAPTURE(c);
        WorkSplit split(n, ranks, c);
        int64_t next = 0;
        std::vector<int64_t> totals(static_cast<size_t>(ranks), 0);
        for (int64_t q = 0; q < split.rounds(); ++q) {
          const ImageRange round = split.round(q);
          REQUIRE(round.begin == next);
          REQUIRE(round.size() >= 1);
          int64_t at = round.begin;
          int64_t smallest = INT64_MAX, largest = 0;
          for (int r = 0; r < ranks; ++r) {
            const ImageRange slice = split.slice(q, r);
            REQUIRE(slice.begin == at);
            REQUIRE(slice.size() >= 0);
            REQUIRE(slice.size() <= c);
            REQUIRE(slice.size() <= split.max_slice());
            smallest = std::min(smallest, slice.size());
            largest = std::max(largest, slice.size());
            totals[static_cast<size_t>(r)] += slice.size();
            at = slice.end;
          }
          REQUIRE(at == round.end);
          REQUIRE(largest - smallest <= 1);
          next = round.end;
        }
        REQUIRE(next == n);
        int64_t sum = 0;
        for (int r = 0; r < ranks; ++r) {
          REQUIRE(split.rank_total(r) == totals[static_cast<size_t>(r)]);
          sum += totals[static_cast<size_t>(r)];
        }
        REQUIRE(sum == n);
        const auto [low, high] = std::minmax_element(totals.begin(), totals.end());
        REQUIRE(*high - *low <= 1);
        // As few rounds as the bound allows.
        REQUIRE(split.rounds() == (n + ranks * c - 1) / (ranks * c));
      }
    }
  }
}

TEST_CASE("work split: ranks past the active ones get nothing") {
  WorkSplit split(10, 2, 4);
  REQUIRE(split.rounds() == 2);
  for (int64_t q = 0; q < split.rounds(); ++q) {
    CHECK(split.slice(q, 2).empty());
    CHECK(split.slice(q, 2).begin == split.round(q).end);
  }
  CHECK(split.rank_total(0) == 5);
  CHECK(split.rank_total(1) == 5);
  CHECK(split.rank_total(7) == 0);
}

TEST_CASE("work split: extras rotate, so totals stay balanced over many rounds") {
  // 3 ranks, rounds of 4 images (N = 8, at most 2 per rank per round): 2+1+1 then 1+2+1 -> 3, 3, 2.
  WorkSplit split(8, 3, 2);
  REQUIRE(split.rounds() == 2);
  CHECK(split.slice(0, 0).size() == 2);
  CHECK(split.slice(0, 1).size() == 1);
  CHECK(split.slice(1, 1).size() == 2);
  CHECK(split.slice(1, 0).size() == 1);
  CHECK(split.rank_total(0) == 3);
  CHECK(split.rank_total(1) == 3);
  CHECK(split.rank_total(2) == 2);
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

TEST_CASE("work split: the closed forms of rank totals and the largest slice agree with a count of every round") {
  for (int64_t n : {0, 1, 2, 7, 100, 1021, 4096, 10007}) {
    for (int ranks : {1, 2, 3, 5, 8}) {
      for (int64_t per : {1, 2, 3, 64, 1000}) {
        CAPTURE(n);
        CAPTURE(ranks);
        CAPTURE(per);
        const WorkSplit split(n, ranks, per);
        std::vector<int64_t> counted(static_cast<size_t>(ranks), 0);
        int64_t largest = 0;
        for (int64_t q = 0; q < split.rounds(); ++q) {
          for (int r = 0; r < ranks; ++r) {
            counted[static_cast<size_t>(r)] += split.slice(q, r).size();
            largest = std::max(largest, split.slice(q, r).size());
          }
        }
        for (int r = 0; r < ranks; ++r) CHECK(split.rank_total(r) == counted[static_cast<size_t>(r)]);
        CHECK(split.max_slice() == largest);
      }
    }
  }
}

TEST_CASE("work split: N = 10^12 takes no memory or time per round") {
  const int64_t n = 1000000000000;
  const WorkSplit split(n, 2, 1024);
  CHECK(split.rounds() == (n + 2047) / 2048);
  CHECK(split.max_slice() == 1024);
  CHECK(split.rank_total(0) + split.rank_total(1) == n);
  const ImageRange last = split.round(split.rounds() - 1);
  CHECK(last.end == n);
  CHECK(split.slice(split.rounds() - 1, 1).end == n);
}
