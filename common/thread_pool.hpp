// thread_pool.hpp: threads started once and reused by every call, for work split into many short
// parallel loops (the CPU backend runs five layers per pass of images, each a parallel loop of a
// millisecond or two, where starting threads per loop would cost a noticeable share).
//
// pool.parallel_for(count, body) calls body(begin, end) on contiguous, disjoint ranges that cover
// [0, count) exactly once and returns when all are done, like parallel_for in threads.hpp: the
// calling thread works too, the others take ranges of about count / (8 * size()) items from a
// shared counter, so a thread slowed down by a busy machine does not hold up the rest. The split
// only decides which thread computes an item, never how. An exception thrown by a body is rethrown
// on the calling thread (the first one caught). Calls from several threads take turns; a call from
// inside a body runs on the calling thread alone. Threads that cannot be started leave their share
// to those that could (the calling thread at least).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace facegen {

class ThreadPool {
 public:
  // threads <= 0: every CPU available_cpus() finds. Starts threads - 1 worker threads.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Threads that work on a call, the calling one included.
  int size() const { return int(workers_.size()) + 1; }

  template <class Body>
  void parallel_for(int64_t count, Body&& body) {
    run(count, [](void* b, int64_t begin, int64_t end) { (*static_cast<Body*>(b))(begin, end); },
        &body);
  }

 private:
  using Call = void (*)(void* body, int64_t begin, int64_t end);
  void run(int64_t count, Call call, void* body);
  void take_ranges() noexcept;  // until the counter passes count_
  void worker_loop();

  std::vector<std::thread> workers_;
  std::mutex caller_mutex_;  // one call at a time

  // The current call, guarded by mutex_ (next_ is taken without it).
  std::mutex mutex_;
  std::condition_variable wake_;  // a new call, or stopping
  std::condition_variable done_;  // the last worker finished its part of the call
  uint64_t generation_ = 0;
  bool stopping_ = false;
  int busy_ = 0;  // workers still on the current call
  int64_t count_ = 0, grain_ = 1;
  Call call_ = nullptr;
  void* body_ = nullptr;
  std::atomic<int64_t> next_{0};
  std::exception_ptr error_;
};

}  // namespace facegen
