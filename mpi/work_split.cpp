// work_split.cpp: contiguous shares of whole blocks (see work_split.hpp).
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

WorkSplit::WorkSplit(int64_t total_images, int ranks, int64_t block_images)
    : total_(total_images), block_(block_images) {
  if (total_images < 0 || ranks < 1 || block_images < 1) {
    throw std::invalid_argument("WorkSplit(" + std::to_string(total_images) + ", " + std::to_string(ranks) + ", " +
                                std::to_string(block_images) + ")");
  }
  blocks_ = total_ == 0 ? 0 : (total_ - 1) / block_ + 1;
  active_ = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(ranks, blocks_)));
}

ImageRange WorkSplit::share(int rank) const {
  if (rank < 0) throw std::out_of_range("WorkSplit::share: negative rank");
  if (rank >= active_) return {total_, total_};
  // Rank r's blocks: [r B / A, (r + 1) B / A); the product in 128 bits for a huge N.
  const auto first_block = [&](int r) { return static_cast<int64_t>(static_cast<__int128>(r) * blocks_ / active_); };
  const auto image = [&](int64_t b) { return std::min(total_, static_cast<int64_t>(static_cast<__int128>(b) * block_)); };
  return {image(first_block(rank)), image(first_block(rank + 1))};
}

}  // namespace mpi
}  // namespace facegen
