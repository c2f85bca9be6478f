// threads.hpp: how many CPUs this process was given, and a range of independent work split over them.
//
// parallel_for(count, threads, body) calls body(begin, end) on contiguous, disjoint ranges that cover
// [0, count) exactly once and returns when all are done. Threads take ranges of about
// count / (8 * threads) items from a shared counter, so a thread slowed down by a busy machine
// does not hold up the rest. The split only decides which thread computes an item, never how:
// callers keep every item's arithmetic the same whatever the thread count. An exception thrown by
// a body is rethrown on the calling thread. Threads that cannot be started leave their share to
// those that could (the calling thread at least).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace facegen {

// The CPUs this process may use, from what it was given, smallest first: the CPU affinity mask
// (taskset, mpirun/srun binding), a cgroup CPU quota (containers, Slurm's cgroup plugin), then
// SLURM_CPUS_PER_TASK and OMP_NUM_THREADS when set. Never less than 1. `why` (optional) names the
// limit that decided, e.g. "affinity mask" or "OMP_NUM_THREADS=1".
int available_cpus(std::string* why = nullptr);

// threads <= 0 means every CPU available_cpus() finds.
inline int resolve_threads(int threads) { return threads > 0 ? threads : available_cpus(); }

template <class Body>
void parallel_for(int64_t count, int threads, Body body) {
  if (count <= 0) return;
  const int64_t workers = std::min<int64_t>(resolve_threads(threads), count);
  if (workers == 1) {
    body(int64_t{0}, count);
    return;
  }
  const int64_t grain = std::max<int64_t>(1, count / (8 * workers));
  std::atomic<int64_t> next{0};
  std::vector<std::exception_ptr> errors(workers);
  std::vector<std::thread> pool;
  pool.reserve(workers - 1);
  auto run = [&](int64_t t) {
    try {
      for (int64_t begin = next.fetch_add(grain); begin < count; begin = next.fetch_add(grain))
        body(begin, std::min(count, begin + grain));
    } catch (...) {
      errors[t] = std::current_exception();
    }
  };
  // A thread that cannot be started (no memory for its stack) leaves its share to the others.
  try {
    for (int64_t t = 1; t < workers; ++t) pool.emplace_back(run, t);
  } catch (const std::system_error&) {
  }
  run(0);
  for (auto& thread : pool) thread.join();
  for (auto& error : errors)
    if (error) std::rethrow_exception(error);
}

}  // namespace facegen
