// threads.hpp: how many CPUs this process was given, and a range of independent work split over them.
//
// parallel_for(count, threads, body) calls body(begin, end) on contiguous, disjoint ranges that cover
// [0, count) exactly once and returns when all are done, on at most `threads` threads of the
// process's one pool (common/work_pool.hpp), the caller's included: no call starts a thread. The
// split only decides which thread computes an item, never how: callers keep every item's arithmetic
// the same whatever the thread count. An exception thrown by a body is rethrown on the calling thread.
#pragma once

#include <cstdint>
#include <string>

#include "common/work_pool.hpp"

namespace facegen {

// The CPUs this process may use, from what it was given, smallest first: the CPU affinity mask
// (taskset, mpirun/srun binding), a cgroup CPU quota (containers, Slurm's cgroup plugin), then
// SLURM_CPUS_PER_TASK and OMP_NUM_THREADS when set. Never less than 1. `why` (optional) names the
// limit that decided, e.g. "affinity mask" or "OMP_NUM_THREADS=1".
int available_cpus(std::string* why = nullptr);

// threads <= 0 means every CPU available_cpus() finds.
inline int resolve_threads(int threads) { return threads > 0 ? threads : available_cpus(); }

template <class Body>
void parallel_for(int64_t count, int threads, Body&& body) {
  WorkPool::process().parallel_for(count, resolve_threads(threads), body);
}

// A share of the process's pool: parallel loops of at most size() threads, the caller's included.
// Holds no thread of its own (the CPU backend's layers and the GPU pipeline's copies use one each).
class ThreadShare {
 public:
  explicit ThreadShare(int threads) : threads_(resolve_threads(threads)) {}
  int size() const { return threads_; }
  template <class Body>
  void parallel_for(int64_t count, Body&& body) {
    WorkPool::process().parallel_for(count, threads_, body);
  }

 private:
  int threads_;
};

}  // namespace facegen
