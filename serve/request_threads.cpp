// request_threads.cpp: see request_threads.hpp.
#include "serve/request_threads.hpp"

#include <pthread.h>

namespace facegen::serve {

RequestThreads::RequestThreads(int threads) {
  for (int t = 0; t < threads; ++t) {
    threads_.emplace_back([this] {
      pthread_setname_np(pthread_self(), "facegen-request");  // for profilers: /proc/PID/task/*/comm
      work();
    });
  }
}

RequestThreads::~RequestThreads() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

void RequestThreads::post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(std::move(task));
  }
  ready_.notify_one();
}

size_t RequestThreads::waiting() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return tasks_.size();
}

void RequestThreads::work() {
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, and nothing left
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace facegen::serve
