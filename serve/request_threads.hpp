// request_threads.hpp: the threads that work on requests whose answer takes CPU for more than a moment
// (a large body's JSON, /v1/latents' numbers, an answer to encode: tar, mosaic, compressed PNGs, the
// protocol's JSON numbers): made once, a fixed number, fed from one queue in arrival order. None
// waits for images: the batcher tells a request when they are made. The event loops (http_server.hpp)
// and the batch workers hand them work and take the answers back, so no loop or worker spends long on
// one request and no connection holds a thread while it reads or is read from.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace facegen::serve {

class RequestThreads {
 public:
  explicit RequestThreads(int threads);
  ~RequestThreads();  // runs every task already posted, then joins
  RequestThreads(const RequestThreads&) = delete;
  RequestThreads& operator=(const RequestThreads&) = delete;

  void post(std::function<void()> task);
  size_t waiting() const;  // tasks posted and not yet begun

 private:
  void work();
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace facegen::serve
