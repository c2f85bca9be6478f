// work_split.hpp: which images each rank generates. Pure arithmetic, no MPI, unit-tested alone.
//
// The job runs in rounds so that every rank holds one chunk at a time. Round q covers the images
// [q*N/Q, (q+1)*N/Q) (integer division), Q = ceil(N / (A*C)) for A active ranks and at most C images
// per rank per round. Inside a round the images are cut into A contiguous slices in rank order, so
// the file order of a round is rank 0's slice, then rank 1's, ...: an exclusive prefix sum of byte
// counts gives every rank its file offset. Slices of one round differ by at most one image; the ranks
// that get the extra image rotate from round to round, so each rank's total over the job is within
// one image of every other's.
//
// Ranks sit out when the job is small: a rank only takes part if every active rank gets at least
// `min_images_per_rank` images, because a rank costs a fixed start-up time (model, GPU context)
// that a few images do not pay back.
#pragma once

#include <cstdint>
#include <vector>

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
  // total_images >= 0, active_ranks >= 1, max_images_per_round >= 1 (per rank).
  WorkSplit(int64_t total_images, int active_ranks, int64_t max_images_per_round);

  int64_t total_images() const { return total_; }
  int active_ranks() const { return active_; }
  int64_t rounds() const { return rounds_; }
  ImageRange round(int64_t q) const;
  // The contiguous images of round q that `rank` generates; empty for rank >= active_ranks().
  ImageRange slice(int64_t q, int rank) const;
  // Images `rank` generates over the whole job (closed form, O(1)).
  int64_t rank_total(int rank) const;
  // The largest slice any rank gets in any round (buffer size).
  int64_t max_slice() const;

 private:
  int64_t slice_size(int64_t q, int rank) const;

  int64_t total_;
  int active_;
  int64_t rounds_ = 0;  // every answer is computed from N, the ranks and this: O(1) memory in N
};

}  // namespace mpi
}  // namespace facegen
