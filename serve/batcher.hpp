// batcher.hpp: concurrent requests' images merged into backend batches, one worker per backend.
//
// A request hands in its latents (count, nz) and waits for its images (count, S, S, nc). Workers
// take images from the queue in arrival order, up to max_batch a batch (a request larger than that is
// split over several batches, possibly on several workers); a worker whose batch is not full waits
// for more until the oldest queued image has waited max_delay. Each image depends only on its own
// latent (backend.hpp), so a request's images are the same whatever batches they were made in. The
// queue holds at most max_queue images: a request that would overflow it is refused at once
// (QueueFull) rather than growing memory. stop() finishes every queued request, then ends the workers.
//
// A worker runs its backend's stream of batches (Backend::generate_stream) for as long as requests
// keep the queue filled: a GPU has the next batches queued while a batch's images, landed in the
// worker's page-locked slots, are copied out to their requests on the process's pool. The first
// batch of a stream waits for max_delay as above; the later ones take what is queued when the stream
// asks, and an empty queue ends the stream (it never waits with a finished batch held back).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "generator/backend.hpp"

namespace facegen::serve {

struct BatcherOptions {
  int64_t max_batch = 256;         // images per backend call
  double max_delay_ms = 2;         // the longest an image waits for its batch to fill
  int64_t max_queue = 16384;       // images queued at once
  int latent_dim = 100;            // nz
  int image_channels = 3;          // nc
  int image_size = kDefaultImageSize;  // S, pixels a side
  int64_t image_values() const { return int64_t{image_size} * image_size * image_channels; }  // floats per image
};

// What one batch was: its images, how long its oldest image queued, and how long from its taking to
// its images in the requests' memory (the backend's time, with a stream's batches queued before it).
struct BatchReport {
  int64_t images = 0;
  double queue_seconds = 0;
  double compute_seconds = 0;
};

struct QueueFull : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Batcher {
 public:
  using Clock = std::chrono::steady_clock;
  Batcher(std::vector<std::unique_ptr<Backend>> backends, const BatcherOptions& options,
          std::function<void(const BatchReport&)> on_batch = nullptr);
  ~Batcher();
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // images (count, image_values) of latents (count, nz); blocks until they are made. Throws QueueFull,
  // std::runtime_error once stopped, or the backend's exception.
  void generate(const float* latents, int64_t count, float* images);
  void stop();  // every queued image made, then the workers end; later generate() calls throw
  int64_t queued_images() const;
  size_t workers() const { return backends_.size(); }
  const BatcherOptions& options() const { return options_; }

 private:
  struct Job;
  struct Slice {
    std::shared_ptr<Job> job;
    int64_t first = 0;  // the job's images [first, first + count)
    int64_t count = 0;
  };
  struct Slot;
  struct WorkerSlots {
    std::deque<std::unique_ptr<Slot>> in_flight;  // given to the backend's stream, in order
    std::vector<std::unique_ptr<Slot>> free;
  };
  void work(Backend& backend);
  bool wait_for_batch();  // false: stopped and empty
  bool take_queued(std::vector<Slice>& batch, Clock::time_point& oldest);  // false: empty now
  bool next_batch(Backend& backend, WorkerSlots& slots, StreamJob& job);
  void finish_batch(Slot& slot, std::exception_ptr error);

  BatcherOptions options_;
  std::function<void(const BatchReport&)> on_batch_;
  std::vector<std::unique_ptr<Backend>> backends_;
  mutable std::mutex mutex_;
  std::condition_variable work_ready_;  // workers: a job came, or stop
  std::condition_variable job_done_;    // callers: a job finished
  std::deque<std::shared_ptr<Job>> queue_;
  int64_t queued_ = 0;  // images not yet taken by a worker
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace facegen::serve
