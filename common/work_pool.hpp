// work_pool.hpp: the process's one pool of worker threads, started once and shared by every stage.
//
// Two kinds of work run on it:
//   parallel_for(count, max_threads, body): a fork-join loop. body(begin, end) is called on contiguous,
//     disjoint ranges that cover [0, count) exactly once; the calling thread works too, and up to
//     max_threads - 1 workers help. Ranges of about count / (8 * threads) items are taken from a
//     shared counter, so a thread slowed down by a busy machine does not hold up the rest. The split
//     only decides which thread computes an item, never how. An exception thrown by a body is
//     rethrown on the calling thread (the first one caught; the others stop after their range).
//     Calls from several threads run at the same time, and a call made inside a body (a worker's
//     task, or another loop) is helped by idle workers too: a caller can always finish its own call
//     alone, so nesting never deadlocks.
//   post(task): a task that runs once on a worker, after the loops that wait for help (or on the
//     caller, where it cannot be queued: a task always runs). The output engine hands out its
//     per-file work so (engine/output_engine.hpp). A task catches its own errors; one that escapes
//     ends the process (std::terminate), as from any thread.
//
// The pool of the process (WorkPool::process()) has available_cpus() workers, started on first use; no
// call starts a thread, so a run starts the same threads whatever N or its chunk size. Threads that
// cannot be started (no memory for a stack) leave the work to those that could, the caller at least.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <new>
#include <thread>
#include <type_traits>
#include <vector>

namespace facegen {

class WorkPool {
 public:
  explicit WorkPool(int workers);  // <= 0: available_cpus()
  ~WorkPool();                     // runs the posted tasks left, then joins
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  // The process's pool: available_cpus() workers, started on the first call.
  static WorkPool& process();
  // Threads started by every pool of this process so far (for the run summary and tests).
  static int64_t threads_started();

  int workers() const { return static_cast<int>(workers_.size()); }

  template <class Body>
  void parallel_for(int64_t count, int max_threads, Body&& body) {
    using Plain = std::remove_reference_t<Body>;
    run(count, max_threads, [](void* b, int64_t begin, int64_t end) { (*static_cast<Plain*>(b))(begin, end); },
        const_cast<void*>(static_cast<const void*>(&body)));
  }

  // Where the task cannot be queued (no worker, or no memory for the queue), the caller runs it.
  template <class Task>
  void post(Task&& task) {
    if (!workers_.empty()) {
      try {
        queue(std::function<void()>(task));
        return;
      } catch (const std::bad_alloc&) {
      }
    }
    task();
  }

 private:
  using Range = void (*)(void* body, int64_t begin, int64_t end);
  struct Call {
    int64_t count = 0;
    int64_t grain = 1;
    std::atomic<int64_t> next{0};
    int helpers_wanted = 0;  // workers that may join (guarded by mutex_)
    int helpers_in = 0;      // workers inside take_ranges (guarded by mutex_)
    Range range = nullptr;
    void* body = nullptr;
    std::exception_ptr error;  // guarded by mutex_
  };
  void run(int64_t count, int max_threads, Range range, void* body);
  void queue(std::function<void()>&& task);
  void take_ranges(Call& call) noexcept;
  Call* call_wanting_help();  // with mutex_ held
  void worker_loop();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;       // a call wants help, a task was posted, or stopping
  std::condition_variable call_done_;  // a helper left a call
  std::vector<Call*> calls_;           // open calls, oldest first
  std::deque<std::function<void()>> tasks_;  // posted and not yet started, oldest first
  bool stopping_ = false;
};

}  // namespace facegen
