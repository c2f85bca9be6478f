// job_progress.hpp: how many images the whole MPI job has generated, for rank 0's progress display,
// fed by the ranks without making them wait.
//
// Rank 0 exposes one int64 per rank in an MPI window. Every other rank, after each step of its work,
// puts its own count there with a request-based one-sided put (MPI_Rput in a passive-target epoch
// opened once): if its previous put has not completed yet, it skips this update instead of waiting,
// so a slow network or a busy rank 0 costs a rank nothing. Rank 0's own count is an atomic that its
// backend adds to as it goes; its display thread reads that and the window's memory (no MPI call
// outside the main thread: the job runs at MPI_THREAD_FUNNELED). Where the window cannot be made, the
// job runs on and only rank 0's share shows.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>

namespace facegen {
namespace mpi {

class JobProgress {
 public:
  JobProgress(MPI_Comm comm, int rank, int ranks);  // collective
  // Not collective: a rank unwinding from a fault must not wait here for the others (MPI_Abort follows).
  ~JobProgress() = default;
  JobProgress(const JobProgress&) = delete;
  JobProgress& operator=(const JobProgress&) = delete;

  std::atomic<int64_t>& own_count() { return own_; }  // this rank's images, added to by its backend
  void publish();             // any rank: send own_count() on to rank 0 if the last send is done
  int64_t job_images() const; // rank 0 (any thread): the job's images so far
  void close();               // collective, on every path all ranks take: completes the last put, frees

 private:
  MPI_Comm comm_;
  int rank_;
  int ranks_;
  MPI_Win window_ = MPI_WIN_NULL;
  int64_t* counts_ = nullptr;  // rank 0: the window's memory, one count per rank
  int64_t in_flight_ = 0;      // the value a pending put is sending (must not change until done)
  MPI_Request pending_ = MPI_REQUEST_NULL;
  std::atomic<int64_t> own_{0};
};

}  // namespace mpi
}  // namespace facegen
