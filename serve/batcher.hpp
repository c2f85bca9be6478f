// batcher.hpp: concurrent requests' images merged into backend batches, by a few workers per backend.
//
// A request hands in its latents (count, nz) and says what it wants of its images (ImageProduct): their
// float32 values (count, S, S, nc), their 8-bit RGB pixels, or each image's PNG. It returns at once; once every image
// is made, its callback is told, on a worker's thread, where they lie: pieces of the page-locked
// slots the backend delivered them into, each piece holding its slot (a reference-counted lease)
// until the last copy of it goes, when the slot goes back to its worker. Nothing is copied on the way
// from the backend to the answer, and no thread waits for a request's images.
//
// Workers take images from the queue in arrival order, up to max_batch a batch (a request larger than
// that is split over several batches, possibly on several workers): what is queued when a worker
// asks, so an idle service makes one image at once and a busy one full batches. A worker whose batch
// is not full waits for more until the oldest queued image has waited max_delay. Each image depends
// only on its own latent (backend.hpp), so a request's images are the same whatever batches they were
// made in. The queue holds at most max_queue images: a request that would overflow it is refused at
// once (QueueFull) rather than growing memory. stop() finishes every queued request, then ends the
// workers.
//
// A worker runs its backend's stream of batches (Backend::generate_stream) for as long as requests
// keep the queue filled: a GPU has the next batches queued while a batch's images land in the
// worker's slots. The first batch of a stream waits for max_delay as above; the later ones take what
// is queued when the stream asks, and an empty queue ends the stream (it never waits with a finished
// batch held back).
//
// A batch is of one encoding: float32 for the requests that want values, 8-bit pixels for the rest
// (queued apart, each in arrival order). A backend that makes only float32 (Backend::makes) makes the
// pixels' batches in float32 too, converted on the worker's thread; one that makes only pixels (a
// CUDA backend built for them) takes no float32 request, and submit() refuses a product that no
// worker makes. The PNGs of ImageProduct::Png are encoded from a batch's pixels on the worker's thread
// (formats/png_encoder.hpp, at png_level); a backend that encodes them itself would deliver them into
// the slot's PNG area instead (see Slot in batcher.cpp).
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

#include "formats/png_encoder.hpp"
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
  int png_level = kDefaultPngLevel;    // the PNGs of ImageProduct::Png
};

// What a request wants of its images.
enum class ImageProduct {
  Floats,  // float32 values (S, S, nc) an image
  Pixels,  // 8-bit RGB (S, S, 3) an image (image_run.hpp: a grey value repeated)
  Png      // the pixels and each image's PNG (the png format's file, at png_level)
};

// What one batch was: its images, how long its oldest image queued, and how long from its taking to
// its images ready for their requests (the backend's time, with a stream's batches queued before it).
struct BatchReport {
  int64_t images = 0;
  double queue_seconds = 0;
  double compute_seconds = 0;
};

// A request's images [first, first + count), where one batch left them.
struct ImagePiece {
  std::shared_ptr<const void> hold;  // the batch's slot: its memory stays while a copy of this lives
  int64_t first = 0;
  int64_t count = 0;
  const void* images = nullptr;      // Floats: (count, image_values) float32; else (count, S, S, 3) bytes
  const uint8_t* flags = nullptr;    // (count): each image's scan (generator/finite_check.hpp)
  const char* png = nullptr;         // Png: image k's PNG at png + k * png_stride, png_bytes[k] bytes
  const uint32_t* png_bytes = nullptr;
  size_t png_stride = 0;
};

// A request's images once made (or its failure).
struct MadeImages {
  ImageProduct product = ImageProduct::Pixels;
  int64_t count = 0;
  std::vector<ImagePiece> pieces;  // in the request's order, covering [0, count); none on failure
  std::exception_ptr error;        // the backend's exception

  // Whether an image holds a NaN or an Inf.
  bool non_finite() const;
  // The images gathered into out: (count, image_bytes) where image_bytes is a piece's bytes an image.
  void copy_to(void* out, size_t image_bytes) const;
};

// Told once, on a worker's thread, with a request's images; it must be quick and not throw (it runs
// between a GPU's batches): what takes longer goes to another thread.
using ImagesMade = std::function<void(MadeImages images)>;

struct QueueFull : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Batcher {
 public:
  using Clock = std::chrono::steady_clock;
  // One worker per backend (backends may share a device: a GPU rewards a few streams of batches).
  Batcher(std::vector<std::unique_ptr<Backend>> backends, const BatcherOptions& options,
          std::function<void(const BatchReport&)> on_batch = nullptr);
  ~Batcher();
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Queues images of latents (count, nz) (the caller's memory, alive until `made` is called) and
  // returns at once; made() is called once every image is made. Throws QueueFull, std::runtime_error
  // once stopped, std::logic_error for a product no worker makes (then made() is never called).
  void submit(const float* latents, int64_t count, ImageProduct product, ImagesMade made);
  // submit() of Floats, waiting for them: images (count, image_values). Throws as submit(), or the
  // backend's exception.
  void generate(const float* latents, int64_t count, float* images);
  void stop();  // every queued image made, then the workers end; later submit() calls throw
  int64_t queued_images() const;
  size_t workers() const { return workers_.size(); }
  bool makes(ImageProduct product) const;
  const BatcherOptions& options() const { return options_; }

 private:
  struct Job;
  struct Slice {
    std::shared_ptr<Job> job;
    int64_t first = 0;  // the job's images [first, first + count)
    int64_t count = 0;
  };
  struct Slot;
  struct SlotPool;
  struct Worker;
  static constexpr int kKinds = 2;  // queues: 0 float32 values, 1 pixels (and PNGs)

  void work(Worker& worker);
  bool serves(const Worker& worker, int kind) const;
  int next_kind(const Worker& worker) const;  // under the lock: the served queue with the oldest front, or -1
  bool wait_for_batch(const Worker& worker);  // false: stopped and empty
  bool take_queued(int kind, std::vector<Slice>& batch, Clock::time_point& oldest);
  int size_class(int64_t images) const;
  int64_t class_capacity(int size_class) const;
  bool next_batch(Worker& worker, StreamJob& job);
  void finish_batch(Worker& worker, std::exception_ptr error);
  void make_pixels_and_pngs(Slot& slot);

  BatcherOptions options_;
  std::function<void(const BatchReport&)> on_batch_;
  std::vector<std::unique_ptr<Backend>> backends_;
  std::vector<std::unique_ptr<Worker>> workers_;
  size_t png_stride_ = 0;  // bytes kept for one image's PNG
  bool interchangeable_ = false;  // every worker takes every kind of job
  mutable std::mutex mutex_;
  std::condition_variable work_ready_;  // workers: a job came, or stop
  std::deque<std::shared_ptr<Job>> queues_[kKinds];
  int64_t queued_[kKinds] = {0, 0};  // images not yet taken by a worker
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace facegen::serve
