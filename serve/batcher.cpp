// batcher.cpp: the queues of batcher.hpp, its workers and their slots.
#include "serve/batcher.hpp"

#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "common/threads.hpp"
#include "formats/image_run.hpp"
#include "generator/finite_check.hpp"

namespace facegen::serve {
namespace {

// A worker's free slots of one size kept for reuse: at least 4, else as many as 64 MiB of images hold.
constexpr int64_t kKeptSlotBytes = int64_t{64} << 20;

int kind_of(ImageProduct product) { return product == ImageProduct::Floats ? 0 : 1; }

void no_free(void*) {}

// The bytes of one image's PNG at level 0 (stored: the same for every size x size picture).
size_t stored_png_bytes(int size) {
  const std::vector<unsigned char> black(static_cast<size_t>(rgb8_image_bytes(size)), 0);
  std::string png;
  PngEncoder(0).encode(black.data(), size, size, png);
  return png.size();
}

}  // namespace

bool MadeImages::non_finite() const {
  for (const ImagePiece& piece : pieces) {
    for (int64_t k = 0; k < piece.count; ++k) {
      if (piece.flags[k] & kImageNonFinite) return true;
    }
  }
  return false;
}

void MadeImages::copy_to(void* out, size_t image_bytes) const {
  for (const ImagePiece& piece : pieces) {
    std::memcpy(static_cast<char*>(out) + piece.first * image_bytes, piece.images, static_cast<size_t>(piece.count) * image_bytes);
  }
}

struct Batcher::Job {
  const float* latents = nullptr;  // (count, nz), the caller's, alive until made() is called
  int64_t count = 0;
  ImagesMade made;
  int64_t taken = 0;   // images handed to workers
  int64_t landed = 0;  // images made (or failed)
  MadeImages result;
  Clock::time_point queued;
};

// One batch's memory, from its taking until the last piece of it is let go: its latents gathered
// from the requests, and what its images land in (the backend's memory: page-locked for a GPU). Slots
// come in sizes (a power of two images, or max_batch), so that the small batches of a light load each
// hold a small slot while their answers are written.
struct Batcher::Slot {
  int64_t capacity = 0;                // images
  std::vector<float> latents;          // (capacity, nz)
  HostBuffer floats{nullptr, no_free};  // (capacity, image_values) float32, made on first use
  HostBuffer pixels{nullptr, no_free};  // (capacity, S, S, 3), made on first use
  HostBuffer flags{nullptr, no_free};   // (capacity): the backend's scan of each image
  // ImageProduct::Png: image i's PNG at png[i * stride], png_bytes[i] bytes, made from the pixels
  // here; a backend that made them itself (a GPU encoder of the png format's bytes) would deliver them
  // into this area through its stream's target, and make_pixels_and_pngs() would leave them be.
  std::unique_ptr<char[]> png;
  std::unique_ptr<uint32_t[]> png_bytes;
  std::vector<Slice> slices;
  int64_t count = 0;
  ImageEncoding encoding = ImageEncoding::Float32;
  Clock::time_point oldest, taken;
};

// A worker's slots not in use, by size: the last lease of a slot gives it back here, from any thread.
struct Batcher::SlotPool {
  std::mutex mutex;
  std::vector<std::vector<std::unique_ptr<Slot>>> free;  // [size class]

  void give_back(Slot* slot, size_t size_class) {
    std::lock_guard<std::mutex> lock(mutex);
    free[size_class].emplace_back(slot);
  }
  // A free slot of the class, or null; the class's free slots past `keep` are freed (here, on the
  // worker's thread, where freeing page-locked memory may wait).
  std::unique_ptr<Slot> take(size_t size_class, size_t keep) {
    std::vector<std::unique_ptr<Slot>> extra;  // freed outside the lock
    std::lock_guard<std::mutex> lock(mutex);
    std::vector<std::unique_ptr<Slot>>& slots = free[size_class];
    if (slots.empty()) return nullptr;
    std::unique_ptr<Slot> slot = std::move(slots.back());
    slots.pop_back();
    while (slots.size() > keep) {
      extra.push_back(std::move(slots.back()));
      slots.pop_back();
    }
    return slot;
  }
};

struct Batcher::Worker {
  Backend* backend = nullptr;
  bool floats = false, pixels = false;  // the encodings its backend makes
  std::shared_ptr<SlotPool> pool = std::make_shared<SlotPool>();
  std::deque<std::unique_ptr<Slot>> in_flight;  // given to the backend's stream, in order
  std::vector<Slice> taking;                    // the next batch's slices, before its slot
};

Batcher::Batcher(std::vector<std::unique_ptr<Backend>> backends, const BatcherOptions& options,
                 std::function<void(const BatchReport&)> on_batch)
    : options_(options), on_batch_(std::move(on_batch)), backends_(std::move(backends)) {
  if (backends_.empty()) throw std::invalid_argument("Batcher: no backend");
  if (options_.max_batch < 1 || options_.max_queue < 1) throw std::invalid_argument("Batcher: bad limits");
  png_stride_ = stored_png_bytes(options_.image_size) + (options_.png_level > 0 ? 256 : 0);  // compressed: never past stored + a block's head
  for (auto& backend : backends_) {
    auto worker = std::make_unique<Worker>();
    worker->backend = backend.get();
    worker->floats = backend->makes(ImageEncoding::Float32);
    worker->pixels = backend->makes(ImageEncoding::Rgb8);
    worker->pool->free.resize(static_cast<size_t>(size_class(options_.max_batch)) + 1);
    workers_.push_back(std::move(worker));
  }
  interchangeable_ = true;
  for (const auto& worker : workers_) interchangeable_ = interchangeable_ && worker->floats;
  for (auto& worker : workers_) {
    threads_.emplace_back([this, w = worker.get()] {
      pthread_setname_np(pthread_self(), "facegen-batch");  // for profilers: /proc/PID/task/*/comm
      work(*w);
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
  return queued_[0] + queued_[1];
}

// Pixels are made by every worker (converted on the host where its backend makes float32 only).
bool Batcher::serves(const Worker& worker, int kind) const { return kind == 1 || worker.floats; }

bool Batcher::makes(ImageProduct product) const {
  for (const auto& worker : workers_) {
    if (serves(*worker, kind_of(product))) return true;
  }
  return false;
}

void Batcher::submit(const float* latents, int64_t count, ImageProduct product, ImagesMade made) {
  if (!makes(product)) throw std::logic_error("Batcher: no worker makes float32 images");
  if (count <= 0) {
    MadeImages none;
    none.product = product;
    made(std::move(none));
    return;
  }
  auto job = std::make_shared<Job>();
  job->latents = latents;
  job->count = count;
  job->made = std::move(made);
  job->result.product = product;
  job->result.count = count;
  const int kind = kind_of(product);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw std::runtime_error("the service is stopping");
    const int64_t queued = queued_[0] + queued_[1];
    if (queued + count > options_.max_queue) {
      throw QueueFull("the queue holds " + std::to_string(queued) + " images and takes at most " +
                      std::to_string(options_.max_queue) + "; try again shortly");
    }
    job->queued = Clock::now();
    queues_[kind].push_back(std::move(job));
    queued_[kind] += count;
  }
  // One idle worker is enough where every worker takes every job (no wake-up of the others to find
  // it taken); else every one, as only some take this kind.
  if (interchangeable_) work_ready_.notify_one();
  else work_ready_.notify_all();
}

void Batcher::generate(const float* latents, int64_t count, float* images) {
  std::mutex mutex;
  std::condition_variable landed;
  bool done = false;
  MadeImages made;
  submit(latents, count, ImageProduct::Floats, [&](MadeImages result) {
    std::lock_guard<std::mutex> lock(mutex);  // notified under the lock: this frame outlives the call
    made = std::move(result);
    done = true;
    landed.notify_one();
  });
  std::unique_lock<std::mutex> lock(mutex);
  landed.wait(lock, [&] { return done; });
  if (made.error) std::rethrow_exception(made.error);
  made.copy_to(images, static_cast<size_t>(options_.image_values()) * sizeof(float));
}

int Batcher::next_kind(const Worker& worker) const {
  int best = -1;
  for (int kind = 0; kind < kKinds; ++kind) {
    if (!serves(worker, kind) || queues_[kind].empty()) continue;
    if (best < 0 || queues_[kind].front()->queued < queues_[best].front()->queued) best = kind;
  }
  return best;
}

// Waits for work this worker makes, then for its batch to fill or its oldest image's delay to pass.
// False once stopped with nothing left that it makes.
bool Batcher::wait_for_batch(const Worker& worker) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto delay = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(options_.max_delay_ms));
  for (;;) {
    work_ready_.wait(lock, [&] { return stopping_ || next_kind(worker) >= 0; });
    int kind = next_kind(worker);
    if (kind < 0) return false;  // stopping, nothing left
    const Clock::time_point deadline = queues_[kind].front()->queued + delay;
    work_ready_.wait_until(lock, deadline, [&] {
      kind = next_kind(worker);
      return stopping_ || kind < 0 || queued_[kind] >= options_.max_batch;
    });
    if (next_kind(worker) >= 0) return true;  // another worker may have taken it all meanwhile
  }
}

// Under the lock: up to max_batch images from the front of queue `kind` as it is now.
bool Batcher::take_queued(int kind, std::vector<Slice>& batch, Clock::time_point& oldest) {
  std::deque<std::shared_ptr<Job>>& queue = queues_[kind];
  if (queue.empty()) return false;
  oldest = queue.front()->queued;
  int64_t images = 0;
  while (images < options_.max_batch && !queue.empty()) {
    const std::shared_ptr<Job>& job = queue.front();
    const int64_t take = std::min(job->count - job->taken, options_.max_batch - images);
    batch.push_back({job, job->taken, take});
    job->taken += take;
    images += take;
    if (job->taken == job->count) queue.pop_front();
  }
  queued_[kind] -= images;
  return true;
}

// Slot sizes: class c holds 2^c images, the last class max_batch.
int Batcher::size_class(int64_t images) const {
  int c = 0;
  while ((int64_t{1} << c) < images) ++c;
  return c;
}

int64_t Batcher::class_capacity(int size_class) const {
  return std::min<int64_t>(int64_t{1} << size_class, options_.max_batch);
}

// The next batch of the stream into a free slot of its size (one made where none is free), or false
// where no queue this worker makes is filled now: the stream then ends, and the worker waits for more.
bool Batcher::next_batch(Worker& worker, StreamJob& job) {
  worker.taking.clear();
  Clock::time_point oldest;
  int kind = -1;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    kind = next_kind(worker);
    if (kind >= 0) take_queued(kind, worker.taking, oldest);
  }
  if (kind < 0) return false;
  int64_t count = 0;
  for (const Slice& s : worker.taking) count += s.count;
  const int slot_class = size_class(count);
  const int64_t capacity = class_capacity(slot_class);
  const int channels = options_.image_channels, size = options_.image_size;
  const int64_t slot_bytes = capacity * image_bytes(ImageEncoding::Float32, channels, size);
  std::unique_ptr<Slot> slot = worker.pool->take(static_cast<size_t>(slot_class), static_cast<size_t>(std::max<int64_t>(4, kKeptSlotBytes / slot_bytes)));
  if (!slot) {
    slot = std::make_unique<Slot>();
    slot->capacity = capacity;
    slot->latents.resize(static_cast<size_t>(capacity * options_.latent_dim));
    slot->flags = worker.backend->allocate_host(static_cast<size_t>(capacity));
  }
  slot->slices.swap(worker.taking);
  slot->oldest = oldest;
  slot->taken = Clock::now();
  slot->encoding = kind == 1 && worker.pixels ? ImageEncoding::Rgb8 : ImageEncoding::Float32;
  HostBuffer& images = slot->encoding == ImageEncoding::Rgb8 ? slot->pixels : slot->floats;
  if (!images) {
    // From the backend (page-locked for a GPU), so that its downloads land here with no copy.
    images = worker.backend->allocate_host(static_cast<size_t>(capacity * image_bytes(slot->encoding, channels, size)));
  }
  const int64_t nz = options_.latent_dim;
  int64_t at = 0;
  for (const Slice& s : slot->slices) {
    std::memcpy(slot->latents.data() + at * nz, s.job->latents + s.first * nz, static_cast<size_t>(s.count * nz) * sizeof(float));
    at += s.count;
  }
  slot->count = at;
  job.latents = slot->latents.data();
  job.n = at;
  job.out = ImageTarget{slot->encoding, images.get(), static_cast<uint8_t*>(slot->flags.get()), options_.latent_dim, channels, size};
  worker.in_flight.push_back(std::move(slot));
  return true;
}

// What the requests of a landed batch want beyond what the backend made: 8-bit pixels converted from
// float32 (a backend that makes float32 only), and the PNG of each image of ImageProduct::Png.
void Batcher::make_pixels_and_pngs(Slot& slot) {
  if (slot.slices.empty() || slot.slices.front().job->result.product == ImageProduct::Floats) return;
  const int channels = options_.image_channels, size = options_.image_size;
  const int64_t values = options_.image_values(), rgb_bytes = rgb8_image_bytes(size);
  if (slot.encoding == ImageEncoding::Float32) {
    if (!slot.pixels) slot.pixels = plain_host_buffer(static_cast<size_t>(slot.capacity * rgb_bytes));
    const float* floats = static_cast<const float*>(slot.floats.get());
    auto* pixels = static_cast<unsigned char*>(slot.pixels.get());
    const int threads = static_cast<int>(std::clamp<int64_t>(slot.count / 64, 1, 4));
    parallel_for(slot.count, threads, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) image_to_rgb8(floats + i * values, channels, size, pixels + i * rgb_bytes);
    });
  }
  int64_t at = 0;
  for (const Slice& s : slot.slices) {
    if (s.job->result.product == ImageProduct::Png) {
      if (!slot.png) {
        slot.png.reset(new char[static_cast<size_t>(slot.capacity) * png_stride_]);
        slot.png_bytes.reset(new uint32_t[static_cast<size_t>(slot.capacity)]);
      }
      thread_local std::string png;
      const auto* pixels = static_cast<const unsigned char*>(slot.pixels.get());
      for (int64_t i = at; i < at + s.count; ++i) {
        thread_png_encoder(options_.png_level).encode(pixels + i * rgb_bytes, size, size, png);
        if (png.size() > png_stride_) throw std::logic_error("Batcher: a PNG larger than its place in the slot");
        std::memcpy(slot.png.get() + static_cast<size_t>(i) * png_stride_, png.data(), png.size());
        slot.png_bytes[static_cast<size_t>(i)] = static_cast<uint32_t>(png.size());
      }
    }
    at += s.count;
  }
}

// The oldest batch in flight has landed (or failed): its requests get their pieces of it, each
// holding the slot, which goes back to the worker's pool once the last of them is let go; the
// requests whose every image is now made are told, outside the lock.
void Batcher::finish_batch(Worker& worker, std::exception_ptr error) {
  std::unique_ptr<Slot> owned = std::move(worker.in_flight.front());
  worker.in_flight.pop_front();
  Slot& slot = *owned;
  if (!error) {
    try {
      make_pixels_and_pngs(slot);
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (on_batch_) {
    const Clock::time_point end = Clock::now();
    on_batch_({slot.count, std::chrono::duration<double>(slot.taken - slot.oldest).count(), std::chrono::duration<double>(end - slot.taken).count()});
  }
  const std::shared_ptr<SlotPool> pool = worker.pool;
  const size_t size = static_cast<size_t>(size_class(slot.capacity));
  std::shared_ptr<const void> lease(owned.release(), [pool, size](Slot* p) { pool->give_back(p, size); });
  std::vector<std::shared_ptr<Job>> finished;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    int64_t at = 0;
    for (const Slice& s : slot.slices) {
      MadeImages& result = s.job->result;
      if (error && !result.error) result.error = error;
      if (!error) {
        ImagePiece piece;
        piece.hold = lease;
        piece.first = s.first;
        piece.count = s.count;
        piece.flags = static_cast<const uint8_t*>(slot.flags.get()) + at;
        if (result.product == ImageProduct::Floats) {
          piece.images = static_cast<const float*>(slot.floats.get()) + at * options_.image_values();
        } else {
          piece.images = static_cast<const unsigned char*>(slot.pixels.get()) + at * rgb8_image_bytes(options_.image_size);
        }
        if (result.product == ImageProduct::Png) {
          piece.png = slot.png.get() + static_cast<size_t>(at) * png_stride_;
          piece.png_bytes = slot.png_bytes.get() + at;
          piece.png_stride = png_stride_;
        }
        result.pieces.push_back(std::move(piece));
      }
      s.job->landed += s.count;
      if (s.job->landed == s.job->count) finished.push_back(s.job);
      at += s.count;
    }
    slot.slices.clear();  // the jobs are held by `finished` alone now
  }
  lease.reset();  // the pieces hold the slot now: the last of them gives it back
  for (const std::shared_ptr<Job>& job : finished) {
    MadeImages& result = job->result;
    if (result.error) result.pieces.clear();
    std::sort(result.pieces.begin(), result.pieces.end(), [](const ImagePiece& a, const ImagePiece& b) { return a.first < b.first; });
    job->made(std::move(result));
  }
}

// The backend's stream runs while requests keep coming (the GPU has the next batches queued while a
// batch's images land); once the queues it makes are empty it ends, and the worker waits for more.
void Batcher::work(Worker& worker) {
  while (wait_for_batch(worker)) {
    try {
      // 1: a CPU backend's scan (and 8-bit conversion) of its images on this thread alone, a few
      // microseconds an image beside the milliseconds of making it; a GPU does both on the GPU.
      worker.backend->generate_stream([&](StreamJob& job) { return next_batch(worker, job); },
                                      [&](const StreamJob&) { finish_batch(worker, nullptr); }, 1);
    } catch (...) {
      const std::exception_ptr error = std::current_exception();
      while (!worker.in_flight.empty()) finish_batch(worker, error);
    }
    while (!worker.in_flight.empty()) {
      finish_batch(worker, std::make_exception_ptr(std::logic_error("Batcher: the backend's stream left a batch unfinished")));
    }
  }
}

}  // namespace facegen::serve
