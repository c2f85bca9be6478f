// batcher.cpp: the queue of batcher.hpp and its workers.
#include "serve/batcher.hpp"

#include <pthread.h>

#include <algorithm>
#include <cstring>

namespace facegen::serve {

struct Batcher::Job {
  const float* latents = nullptr;  // (count, nz), the caller's, alive until the job is done
  float* images = nullptr;         // (count, image_values), the caller's
  int64_t count = 0;
  int64_t taken = 0;  // images handed to workers
  int64_t done = 0;   // images made (or failed)
  std::exception_ptr error;
  Clock::time_point queued;
};

Batcher::Batcher(std::vector<std::unique_ptr<Backend>> backends, const BatcherOptions& options,
                 std::function<void(const BatchReport&)> on_batch)
    : options_(options), on_batch_(std::move(on_batch)), backends_(std::move(backends)) {
  if (backends_.empty()) throw std::invalid_argument("Batcher: no backend");
  if (options_.max_batch < 1 || options_.max_queue < 1) throw std::invalid_argument("Batcher: bad limits");
  for (auto& backend : backends_) {
    threads_.emplace_back([this, b = backend.get()] {
      pthread_setname_np(pthread_self(), "facegen-batch");  // for profilers: /proc/PID/task/*/comm
      work(*b);
    });
  }
}

Batcher::~Batcher() { stop(); }

void Batcher::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

int64_t Batcher::queued_images() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queued_;
}

void Batcher::generate(const float* latents, int64_t count, float* images) {
  if (count <= 0) return;
  auto job = std::make_shared<Job>();
  job->latents = latents;
  job->images = images;
  job->count = count;
  std::unique_lock<std::mutex> lock(mutex_);
  if (stopping_) throw std::runtime_error("the service is stopping");
  if (queued_ + count > options_.max_queue) {
    throw QueueFull("the queue holds " + std::to_string(queued_) + " images and takes at most " +
                    std::to_string(options_.max_queue) + "; try again shortly");
  }
  job->queued = Clock::now();
  queue_.push_back(job);
  queued_ += count;
  work_ready_.notify_all();
  job_done_.wait(lock, [&] { return job->done == job->count; });
  if (job->error) std::rethrow_exception(job->error);
}

// Under the lock: waits for work, then for the batch to fill or its oldest image's delay to pass,
// then takes up to max_batch images from the front of the queue.
bool Batcher::take_batch(std::vector<Slice>& batch, Clock::time_point& oldest) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto delay = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(options_.max_delay_ms));
  for (;;) {
    work_ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return false;  // stopping, nothing left
    const Clock::time_point deadline = queue_.front()->queued + delay;
    work_ready_.wait_until(lock, deadline, [&] { return stopping_ || queued_ >= options_.max_batch || queue_.empty(); });
    if (!queue_.empty()) break;  // another worker may have taken it all meanwhile
  }
  oldest = queue_.front()->queued;
  int64_t images = 0;
  while (images < options_.max_batch && !queue_.empty()) {
    const std::shared_ptr<Job>& job = queue_.front();
    const int64_t take = std::min(job->count - job->taken, options_.max_batch - images);
    batch.push_back({job, job->taken, take});
    job->taken += take;
    images += take;
    if (job->taken == job->count) queue_.pop_front();
  }
  queued_ -= images;
  return true;
}

// Gathers the slices' latents (images, nz), makes their images on the backend, scatters them back.
void Batcher::run_batch(Backend& backend, const std::vector<Slice>& batch, Clock::time_point oldest) {
  thread_local std::vector<float> latents, images;
  const int64_t nz = options_.latent_dim, values = options_.image_values;
  int64_t n = 0;
  for (const Slice& s : batch) n += s.count;
  latents.resize(static_cast<size_t>(n * nz));
  images.resize(static_cast<size_t>(n * values));
  int64_t at = 0;
  for (const Slice& s : batch) {
    std::memcpy(latents.data() + at * nz, s.job->latents + s.first * nz, static_cast<size_t>(s.count * nz) * sizeof(float));
    at += s.count;
  }
  const Clock::time_point start = Clock::now();
  std::exception_ptr error;
  try {
    backend.generate(latents.data(), n, images.data());
  } catch (...) {
    error = std::current_exception();
  }
  const Clock::time_point end = Clock::now();
  at = 0;
  for (const Slice& s : batch) {
    if (!error) std::memcpy(s.job->images + s.first * values, images.data() + at * values, static_cast<size_t>(s.count * values) * sizeof(float));
    at += s.count;
  }
  if (on_batch_) on_batch_({n, std::chrono::duration<double>(start - oldest).count(), std::chrono::duration<double>(end - start).count()});
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Slice& s : batch) {
      s.job->done += s.count;
      if (error && !s.job->error) s.job->error = error;
    }
  }
  job_done_.notify_all();
}

void Batcher::work(Backend& backend) {
  std::vector<Slice> batch;
  Clock::time_point oldest;
  for (;;) {
    batch.clear();
    if (!take_batch(batch, oldest)) return;
    run_batch(backend, batch, oldest);
  }
}

}  // namespace facegen::serve
