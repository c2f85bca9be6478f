// work_split.hpp: which images each rank generates. Pure arithmetic, no MPI, unit-tested alone.
//
// The job is cut into blocks of `block_images` (the last may be shorter; split_unit_images() in
// engine/piece_plan.hpp: a run at whose edges every output's files begin), and the generating ranks get
// contiguous runs of whole blocks, in rank order, as equal as the blocks allow (their counts differ
// by at most one block). So every file of the outputs is made and written by one rank alone (a folder
// of PNGs is shared: each of its files is one rank's), and the ranks never meet between the start
// and the commit.
//
// Ranks sit out when the job is small: a rank only takes part if every active rank gets at least
// `min_images_per_rank` images, because a rank costs a fixed start-up time (model, GPU context)
// that a few images do not pay back; and there are never more generating ranks than blocks.
#pragma once

#include <cstdint>

namespace facegen {
namespace mpi {

struct ImageRange {
  int64_t begin = 0;
  int64_t end = 0;  // one past the last image
  int64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
};

// How many of `ranks` ranks generate images: floor(N / min_images_per_rank), clamped to [1, ranks].
// min_images_per_rank <= 1 means every rank works (as long as there is an image for it).
int active_rank_count(int64_t total_images, int ranks, int64_t min_images_per_rank);

class WorkSplit {
 public:
  // total_images >= 0, ranks >= 1 (those that may generate), block_images >= 1.
  WorkSplit(int64_t total_images, int ranks, int64_t block_images);

  int64_t total_images() const { return total_; }
  int64_t block_images() const { return block_; }
  int64_t blocks() const { return blocks_; }
  int active_ranks() const { return active_; }  // min(ranks, blocks), at least 1
  // The images `rank` generates: whole blocks, contiguous; empty for rank >= active_ranks().
  ImageRange share(int rank) const;

 private:
  int64_t total_;
  int64_t block_;
  int64_t blocks_;
  int active_;
};

}  // namespace mpi
}  // namespace facegen
