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
  const int64_t per_round = static_cast<int64_t>(active_ranks) * max_images_per_round;
  const int64_t rounds = (total_images + per_round - 1) / per_round;
  first_extra_.resize(static_cast<size_t>(rounds));
  int next = 0;  // extras are handed out cyclically, continuing where the last round stopped
  for (int64_t q = 0; q < rounds; ++q) {
    first_extra_[static_cast<size_t>(q)] = next;
    next = static_cast<int>((next + round(q).size() % active_ranks) % active_ranks);
  }
}

ImageRange WorkSplit::round(int64_t q) const {
  const int64_t rounds = this->rounds();
  if (q < 0 || q >= rounds) throw std::out_of_range("WorkSplit::round " + std::to_string(q));
  // q * total_ stays far below 2^63: rounds <= total_, and total_ is a count of images.
  return {q * total_ / rounds, (q + 1) * total_ / rounds};
}

int64_t WorkSplit::slice_size(int64_t q, int rank) const {
  const int64_t images = round(q).size();
  const int64_t base = images / active_;
  const int64_t extras = images % active_;
  // Ranks first_extra, first_extra+1, ... (cyclically) get one more image each.
  const int64_t position = (rank - first_extra_[static_cast<size_t>(q)] + active_) % active_;
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

int64_t WorkSplit::rank_total(int rank) const {
  if (rank < 0 || rank >= active_) return 0;
  int64_t total = 0;
  for (int64_t q = 0; q < rounds(); ++q) total += slice_size(q, rank);
  return total;
}

int64_t WorkSplit::max_slice() const {
  int64_t largest = 0;
  for (int64_t q = 0; q < rounds(); ++q) {
    largest = std::max(largest, (round(q).size() + active_ - 1) / active_);
  }
  return largest;
}

}  // namespace mpi
}  // namespace facegen
