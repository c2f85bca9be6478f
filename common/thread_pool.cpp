// thread_pool.cpp: the reused worker threads of ThreadPool (see thread_pool.hpp).
//
// A call publishes (count, body) under a new generation number and wakes the workers; each takes
// ranges from the shared counter until none is left, then reports done. The caller takes ranges
// too and returns once every worker has reported, so no worker can still be inside a body (or miss
// a call) when the next one starts.
#include "common/thread_pool.hpp"

#include <algorithm>
#include <system_error>

#include "common/threads.hpp"

namespace facegen {

namespace {

// The pool whose body this thread is running, if any: a nested call runs inline.
thread_local const ThreadPool* running_body_of = nullptr;

}  // namespace

ThreadPool::ThreadPool(int threads) {
  const int wanted = resolve_threads(threads);
  workers_.reserve(wanted - 1);
  try {
    for (int t = 1; t < wanted; ++t) workers_.emplace_back([this] { worker_loop(); });
  } catch (const std::system_error&) {
    // No memory for another stack: the threads started so far do the work.
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::take_ranges() noexcept {
  const ThreadPool* outer = running_body_of;
  running_body_of = this;
  try {
    for (int64_t begin = next_.fetch_add(grain_); begin < count_; begin = next_.fetch_add(grain_))
      call_(body_, begin, std::min(count_, begin + grain_));
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) error_ = std::current_exception();
    next_.store(count_);  // the others stop after their current range
  }
  running_body_of = outer;
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
    if (stopping_) return;
    seen = generation_;
    lock.unlock();
    take_ranges();
    lock.lock();
    if (--busy_ == 0) done_.notify_one();
  }
}

void ThreadPool::run(int64_t count, Call call, void* body) {
  if (count <= 0) return;
  if (workers_.empty() || count == 1 || running_body_of == this) {
    call(body, 0, count);
    return;
  }
  std::lock_guard<std::mutex> one_call(caller_mutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    count_ = count;
    grain_ = std::max<int64_t>(1, count / (8 * int64_t(size())));
    call_ = call;
    body_ = body;
    next_.store(0);
    error_ = nullptr;
    busy_ = int(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  take_ranges();
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return busy_ == 0; });
    error = error_;
    error_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace facegen
