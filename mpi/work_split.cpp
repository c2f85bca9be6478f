// work_split.cpp: rounds and contiguous slices (see work_split.hpp).
#include "mpi/work_split.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace facegen {
namespace mpi {

int active_rank_count(int64_t total_images, int ranks, int64_t min_images_per_rank) {
  if (ranks < 1) throw std::invalid_argument("active_rank_count: ranks must be >= 1");
  if (total_images < 1) return 1;
  const int64_t by_size = min_images_per_rank <= 1 ? total_images : total_images / min_images_per_rank;
  return static_cast<int>(std::clamp<int64_t>(by_size, 1, ranks));
}

WorkSplit::WorkSplit(int64_t total_images, int active_ranks, int64_t max_images_per_round)
    : total_(total_images), active_(active_ranks) {
  if (total_images < 0 || active_ranks < 1 || max_images_per_round < 1) {
    throw std::invalid_argument("WorkSplit(" + std::to_string(total_images) + ", " + std::to_string(active_ranks) +
                                ", " + std::to_string(max_images_per_round) + ")");
  }
  const int64_t per_round = std::min<int64_t>(total_images, static_cast<int64_t>(active_ranks) * max_images_per_round);
  rounds_ = per_round == 0 ? 0 : (total_images + per_round - 1) / per_round;
}

ImageRange WorkSplit::round(int64_t q) const {
  if (q < 0 || q >= rounds_) throw std::out_of_range("WorkSplit::round " + std::to_string(q));
  // q * total_ may pass 2^63 for a huge N: the product in 128 bits.
  const auto at = [&](int64_t k) {
    return static_cast<int64_t>(static_cast<__int128>(k) * total_ / rounds_);
  };
  return {at(q), at(q + 1)};
}

// Extras are handed out cyclically, continuing where the last round stopped: the round's first extra
// goes to the rank after the last one of every round before, which is rank (images before) % ranks.
int64_t WorkSplit::slice_size(int64_t q, int rank) const {
  const ImageRange images = round(q);
  const int64_t base = images.size() / active_;
  const int64_t extras = images.size() % active_;
  const int64_t first_extra = images.begin % active_;
  const int64_t position = (rank - first_extra + active_) % active_;
  return base + (position < extras ? 1 : 0);
}

ImageRange WorkSplit::slice(int64_t q, int rank) const {
  const ImageRange images = round(q);
  if (rank < 0) throw std::out_of_range("WorkSplit::slice: negative rank");
  if (rank >= active_) return {images.end, images.end};
  int64_t begin = images.begin;
  for (int r = 0; r < rank; ++r) begin += slice_size(q, r);
  return {begin, begin + slice_size(q, rank)};
}

// Rounds have floor(N / Q) or that plus one images (N % Q of them); over the job, the extras of all
// rounds go round the ranks from rank 0 on.
int64_t WorkSplit::rank_total(int rank) const {
  if (rank < 0 || rank >= active_ || rounds_ == 0) return 0;
  const int64_t small = total_ / rounds_;
  const int64_t large_rounds = total_ % rounds_;
  const int64_t small_rounds = rounds_ - large_rounds;
  const int64_t base = large_rounds * ((small + 1) / active_) + small_rounds * (small / active_);
  const int64_t extras = large_rounds * ((small + 1) % active_) + small_rounds * (small % active_);
  return base + extras / active_ + (rank < extras % active_ ? 1 : 0);
}

int64_t WorkSplit::max_slice() const {
  if (rounds_ == 0) return 0;
  const int64_t largest_round = (total_ + rounds_ - 1) / rounds_;
  return (largest_round + active_ - 1) / active_;
}

}  // namespace mpi
}  // namespace facegen
