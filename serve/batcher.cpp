// batcher.cpp: the queue of batcher.hpp and its workers.
#include "serve/batcher.hpp"

#include <pthread.h>

#include <algorithm>
#include <cstring>

#include "common/threads.hpp"

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

// Under the lock: waits for work, then for the batch to fill or its oldest image's delay to pass.
// False once stopped with nothing queued.
bool Batcher::wait_for_batch() {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto delay = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(options_.max_delay_ms));
  for (;;) {
    work_ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return false;  // stopping, nothing left
    const Clock::time_point deadline = queue_.front()->queued + delay;
    work_ready_.wait_until(lock, deadline, [&] { return stopping_ || queued_ >= options_.max_batch || queue_.empty(); });
    if (!queue_.empty()) return true;  // another worker may have taken it all meanwhile
  }
}

// Takes up to max_batch images from the front of the queue as they are now, without waiting; false
// where it is empty.
bool Batcher::take_queued(std::vector<Slice>& batch, Clock::time_point& oldest) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (queue_.empty()) return false;
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

// One batch on its way through a backend's stream: its latents gathered from the requests, the
// memory its images land in (the backend's: page-locked for a GPU), and whose images they are.
struct Batcher::Slot {
  std::vector<float> latents;  // (max_batch, nz)
  HostBuffer images{nullptr, [](void*) {}};  // (max_batch, image_values) float32
  HostBuffer flags{nullptr, [](void*) {}};   // (max_batch) bytes: the backend's scan, not used here
  std::vector<Slice> slices;
  int64_t count = 0;
  Clock::time_point oldest, taken;
};

// The next batch of the stream into a free slot (one made where none is free), or false where the
// queue is empty now: the stream then ends, and the worker waits for more.
bool Batcher::next_batch(Backend& backend, WorkerSlots& slots, StreamJob& job) {
  if (slots.free.empty()) {
    auto slot = std::make_unique<Slot>();
    slot->latents.resize(static_cast<size_t>(options_.max_batch * options_.latent_dim));
    // Both from the backend (page-locked for a GPU), so that its downloads land here with no copy.
    slot->images = backend.allocate_host(static_cast<size_t>(options_.max_batch * options_.image_values()) * sizeof(float));
    slot->flags = backend.allocate_host(static_cast<size_t>(options_.max_batch));
    slots.free.push_back(std::move(slot));
  }
  Slot& slot = *slots.free.back();
  slot.slices.clear();
  if (!take_queued(slot.slices, slot.oldest)) return false;
  slot.taken = Clock::now();
  const int64_t nz = options_.latent_dim;
  int64_t at = 0;
  for (const Slice& s : slot.slices) {
    std::memcpy(slot.latents.data() + at * nz, s.job->latents + s.first * nz, static_cast<size_t>(s.count * nz) * sizeof(float));
    at += s.count;
  }
  slot.count = at;
  job.latents = slot.latents.data();
  job.n = at;
  job.out = ImageTarget{ImageEncoding::Float32, slot.images.get(), static_cast<uint8_t*>(slot.flags.get()), options_.latent_dim,
                        options_.image_channels, options_.image_size};
  slots.in_flight.push_back(std::move(slots.free.back()));
  slots.free.pop_back();
  return true;
}

// The batch's images copied to their requests (in parallel: 12 MB a batch of 256), its requests told.
void Batcher::finish_batch(Slot& slot, std::exception_ptr error) {
  const int64_t values = options_.image_values();
  if (!error) {
    std::vector<int64_t> starts{0};  // slice k holds the batch's images [starts[k], starts[k + 1])
    for (const Slice& s : slot.slices) starts.push_back(starts.back() + s.count);
    const float* images = static_cast<const float*>(slot.images.get());
    const int64_t bytes = slot.count * values * static_cast<int64_t>(sizeof(float));
    const int threads = static_cast<int>(std::clamp<int64_t>(bytes >> 21, 1, 8));  // a thread a 2 MiB
    parallel_for(slot.count, threads, [&](int64_t begin, int64_t end) {
      size_t k = std::upper_bound(starts.begin(), starts.end(), begin) - starts.begin() - 1;
      for (int64_t i = begin; i < end; ++k) {  // the part of slice k within [begin, end)
        const Slice& s = slot.slices[k];
        const int64_t stop = std::min(end, starts[k + 1]);
        std::memcpy(s.job->images + (s.first + i - starts[k]) * values, images + i * values,
                    static_cast<size_t>((stop - i) * values) * sizeof(float));
        i = stop;
      }
    });
  }
  const Clock::time_point end = Clock::now();
  if (on_batch_) on_batch_({slot.count, std::chrono::duration<double>(slot.taken - slot.oldest).count(), std::chrono::duration<double>(end - slot.taken).count()});
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Slice& s : slot.slices) {
      s.job->done += s.count;
      if (error && !s.job->error) s.job->error = error;
    }
  }
  slot.slices.clear();
  job_done_.notify_all();
}

// The backend's stream runs while requests keep coming (the GPU has the next batches queued while a
// batch's images are copied out); once the queue is empty it ends, and the worker waits for more.
void Batcher::work(Backend& backend) {
  WorkerSlots slots;
  auto retire_front = [&](std::exception_ptr error) {
    finish_batch(*slots.in_flight.front(), error);
    slots.free.push_back(std::move(slots.in_flight.front()));
    slots.in_flight.pop_front();
  };
  while (wait_for_batch()) {
    try {
      // 1: the host's scan of a CPU backend's images (backend.hpp) on this thread alone, a few
      // microseconds an image beside the milliseconds of making it; a GPU scans on the GPU.
      backend.generate_stream([&](StreamJob& job) { return next_batch(backend, slots, job); },
                              [&](const StreamJob&) { retire_front(nullptr); }, 1);
    } catch (...) {
      const std::exception_ptr error = std::current_exception();
      while (!slots.in_flight.empty()) retire_front(error);
    }
    while (!slots.in_flight.empty()) retire_front(std::make_exception_ptr(std::logic_error("Batcher: the backend's stream left a batch unfinished")));
  }
}

}  // namespace facegen::serve
