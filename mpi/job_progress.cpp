// job_progress.cpp: the job's image count for rank 0's progress display (see job_progress.hpp).
#include "mpi/job_progress.hpp"

namespace facegen {
namespace mpi {

JobProgress::JobProgress(MPI_Comm comm, int rank, int ranks) : comm_(comm), rank_(rank), ranks_(ranks) {
  const MPI_Aint bytes = rank_ == 0 ? static_cast<MPI_Aint>(ranks_) * sizeof(int64_t) : 0;
  void* memory = nullptr;
  int made = MPI_Win_allocate(bytes, sizeof(int64_t), MPI_INFO_NULL, comm_, &memory, &window_) == MPI_SUCCESS;
  // Every rank must agree on using the window: one that could not make it makes it useless to all.
  int all_made = 0;
  if (MPI_Allreduce(&made, &all_made, 1, MPI_INT, MPI_MIN, comm_) != MPI_SUCCESS) all_made = 0;
  if (!all_made) {
    if (made) MPI_Win_free(&window_);
    window_ = MPI_WIN_NULL;
    return;
  }
  if (rank_ == 0) {
    counts_ = static_cast<int64_t*>(memory);
    for (int r = 0; r < ranks_; ++r) __atomic_store_n(&counts_[r], 0, __ATOMIC_RELAXED);
  }
  MPI_Barrier(comm_);  // the counts are zero before anyone puts
  if (rank_ != 0 && MPI_Win_lock_all(MPI_MODE_NOCHECK, window_) != MPI_SUCCESS) {
    // This rank will not publish; rank 0 simply sees none of its images.
    pending_ = MPI_REQUEST_NULL;
    rank_ = -1;
  }
}

void JobProgress::publish() {
  if (window_ == MPI_WIN_NULL || rank_ <= 0) return;
  if (pending_ != MPI_REQUEST_NULL) {
    int done = 0;
    if (MPI_Test(&pending_, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done) return;
  }
  in_flight_ = own_.load(std::memory_order_relaxed);
  if (MPI_Rput(&in_flight_, 1, MPI_INT64_T, 0, rank_, 1, MPI_INT64_T, window_, &pending_) != MPI_SUCCESS) {
    pending_ = MPI_REQUEST_NULL;
  }
}

int64_t JobProgress::job_images() const {
  int64_t total = own_.load(std::memory_order_relaxed);
  if (counts_ == nullptr) return total;
  for (int r = 1; r < ranks_; ++r) total += __atomic_load_n(&counts_[r], __ATOMIC_RELAXED);
  return total;
}

void JobProgress::close() {
  if (window_ == MPI_WIN_NULL) return;
  if (pending_ != MPI_REQUEST_NULL) MPI_Wait(&pending_, MPI_STATUS_IGNORE);
  if (rank_ > 0) MPI_Win_unlock_all(window_);
  MPI_Win_free(&window_);
  window_ = MPI_WIN_NULL;
  counts_ = nullptr;
}

}  // namespace mpi
}  // namespace facegen
