// work_pool.cpp: the workers of WorkPool (see work_pool.hpp).
//
// A loop is published as a Call in calls_; a worker that wakes joins the oldest call that still has
// ranges and room for a helper, else starts the oldest posted task. The caller takes ranges too,
// unpublishes the call once the counter has passed the end (so no worker joins late), and returns
// when every helper has left it, so no worker can still be inside its body.
#include "common/work_pool.hpp"

#include <pthread.h>

#include <algorithm>
#include <system_error>

#include "common/threads.hpp"

namespace facegen {
namespace {

std::atomic<int64_t> started_threads{0};

}  // namespace

WorkPool::WorkPool(int workers) {
  const int wanted = workers > 0 ? workers : available_cpus();
  workers_.reserve(static_cast<size_t>(wanted));
  try {
    for (int t = 0; t < wanted; ++t) {
      workers_.emplace_back([this] { worker_loop(); });
      started_threads.fetch_add(1);
    }
  } catch (const std::system_error&) {
    // No memory for another stack: the threads started so far (and the callers) do the work.
  }
}

WorkPool::~WorkPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& worker : workers_) worker.join();
  // Without workers (none could be started), posted tasks run here.
  while (!tasks_.empty()) {
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    task();
  }
}

WorkPool& WorkPool::process() {
  // Never destroyed: a worker may still be finishing a task while static destructors run.
  static WorkPool* pool = new WorkPool(0);
  return *pool;
}

int64_t WorkPool::threads_started() { return started_threads.load(); }

void WorkPool::queue(std::function<void()>&& task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(std::move(task));
  }
  wake_.notify_one();
}

void WorkPool::take_ranges(Call& call) noexcept {
  try {
    for (int64_t begin = call.next.fetch_add(call.grain); begin < call.count; begin = call.next.fetch_add(call.grain))
      call.range(call.body, begin, std::min(call.count, begin + call.grain));
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!call.error) call.error = std::current_exception();
    call.next.store(call.count);  // the others stop after their current range
  }
}

WorkPool::Call* WorkPool::call_wanting_help() {
  for (Call* call : calls_) {
    if (call->helpers_in < call->helpers_wanted && call->next.load(std::memory_order_relaxed) < call->count) return call;
  }
  return nullptr;
}

void WorkPool::worker_loop() {
  pthread_setname_np(pthread_self(), "facegen-pool");  // for profilers and /proc/PID/task/*/comm
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (Call* call = call_wanting_help()) {
      ++call->helpers_in;
      lock.unlock();
      take_ranges(*call);
      lock.lock();
      --call->helpers_in;
      call_done_.notify_all();
      continue;
    }
    if (!tasks_.empty()) {
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      task = nullptr;  // its captures go before the lock is taken again
      lock.lock();
      continue;
    }
    if (stopping_) return;
    wake_.wait(lock);
  }
}

void WorkPool::run(int64_t count, int max_threads, Range range, void* body) {
  if (count <= 0) return;
  const int helpers = static_cast<int>(std::min<int64_t>({count - 1, int64_t{max_threads} - 1, int64_t(workers_.size())}));
  if (helpers <= 0) {
    range(body, 0, count);
    return;
  }
  Call call;
  call.count = count;
  call.grain = std::max<int64_t>(1, count / (8 * int64_t{helpers + 1}));
  call.helpers_wanted = helpers;
  call.range = range;
  call.body = body;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    calls_.push_back(&call);
  }
  if (helpers >= static_cast<int>(workers_.size())) {
    wake_.notify_all();
  } else {
    for (int h = 0; h < helpers; ++h) wake_.notify_one();
  }
  take_ranges(call);
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    calls_.erase(std::find(calls_.begin(), calls_.end(), &call));
    call_done_.wait(lock, [&] { return call.helpers_in == 0; });
    error = call.error;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace facegen
