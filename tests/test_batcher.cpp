// test_batcher.cpp: the batcher (serve/batcher.hpp) over backends made here: one that records its
// batches (the default stream, a batch at a time), one whose stream asks for batches ahead of the
// one it delivers, as the CUDA pipeline's does, and ones that make one encoding only, as a CUDA
// backend does. Concurrent requests are merged into batches of at most max_batch images, a request
// larger than that is split, every request gets its own images back whatever batch made them, in
// each product (float32, pixels, PNGs), as pieces of the slots that are never reused while held, told
// once; a full queue refuses at once, a backend's failure reaches the requests of its batches (and
// the worker goes on), stop() finishes queued work.
#include <doctest/doctest.h>

#include <atomic>
#include <condition_variable>
#include <limits>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "formats/image_run.hpp"
#include "formats/output_format.hpp"
#include "serve/batcher.hpp"

using namespace facegen;
using namespace facegen::serve;

namespace {

constexpr int kNz = 2;
constexpr int kSize = 64;          // pixels a side, but where a test says otherwise
constexpr int64_t kValues = 4096;  // floats per image: 64 x 64, one channel
constexpr int64_t kPixelBytes = rgb8_image_bytes(kSize);

// Image i of latents (n, nz): (latent[0] + latent[1], latent[0], 7, 0, 0, ...), `values` floats.
void fake_images(const float* latents, int64_t n, float* images, int64_t values = kValues) {
  std::memset(images, 0, static_cast<size_t>(n * values) * sizeof(float));
  for (int64_t i = 0; i < n; ++i) {
    images[i * values + 0] = latents[i * kNz] + latents[i * kNz + 1];
    images[i * values + 1] = latents[i * kNz];
    images[i * values + 2] = 7;
  }
}

// fake_images, recording each batch's size.
class RecordingBackend : public Backend {
 public:
  std::string describe() const override { return "recording"; }
  void generate(const float* latents, int64_t n, float* images) override {
    if (fail) throw std::runtime_error("the backend failed");
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    fake_images(latents, n, images, int64_t{size} * size);
    std::lock_guard<std::mutex> lock(mutex);
    batches.push_back(n);
  }
  int size = kSize;  // of the images: one channel of size x size
  std::mutex mutex;
  std::vector<int64_t> batches;
  std::atomic<bool> fail{false};
  int delay_ms = 0;
};

// A stream that asks for up to `ahead` batches before it delivers the first of them, as the CUDA
// pipeline does, and fails once where told (every batch it holds then fails, and the stream ends).
class LookaheadBackend : public Backend {
 public:
  std::string describe() const override { return "lookahead"; }
  bool makes(ImageEncoding encoding) const override { return encoding == ImageEncoding::Float32; }  // as a float32 pipeline
  void generate(const float* latents, int64_t n, float* images) override { fake_images(latents, n, images); }
  void generate_stream(const NextJob& next, const JobDone& done, int) override {
    std::deque<StreamJob> held;
    bool ended = false;
    for (;;) {
      while (!ended && static_cast<int>(held.size()) < ahead) {
        StreamJob job;
        if (next(job)) held.push_back(job);
        else ended = true;
      }
      if (held.empty()) return;
      ++streamed;
      if (fail_at == streamed) throw std::runtime_error("the stream failed");
      CHECK(held.front().out.encoding == ImageEncoding::Float32);
      fake_images(held.front().latents, held.front().n, static_cast<float*>(held.front().out.images));
      done(held.front());
      held.pop_front();
    }
  }
  int ahead = 3;
  std::atomic<int> streamed{0};  // batches delivered or failed
  int fail_at = -1;              // the batch (counted from 1) that throws
};

BatcherOptions options(int64_t max_batch, double delay_ms, int64_t max_queue = 1 << 20, int size = kSize) {
  BatcherOptions o;
  o.max_batch = max_batch;
  o.max_delay_ms = delay_ms;
  o.max_queue = max_queue;
  o.latent_dim = kNz;
  o.image_channels = 1;
  o.image_size = size;  // kValues where kSize
  return o;
}

// `count` latents (count, nz) tagged by request `id`, and a check of their images.
std::vector<float> latents_of(int id, int64_t count) {
  std::vector<float> latents(static_cast<size_t>(count * kNz));
  for (int64_t i = 0; i < count; ++i) latents[i * kNz] = static_cast<float>(id * 1000 + i), latents[i * kNz + 1] = 0.5f;
  return latents;
}
bool images_match(int id, int64_t count, const std::vector<float>& images) {
  for (int64_t i = 0; i < count; ++i) {
    if (images[i * kValues + 1] != static_cast<float>(id * 1000 + i) || images[i * kValues + 2] != 7) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("batcher: concurrent requests share batches and each gets its own images") {
  auto backend = std::make_unique<RecordingBackend>();
  RecordingBackend* recorder = backend.get();
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(std::move(backend));
  std::atomic<int64_t> reported{0};
  Batcher batcher(std::move(backends), options(16, 200), [&](const BatchReport& r) { reported += r.images; });
  std::vector<std::thread> clients;
  std::atomic<int> right{0};
  for (int id = 0; id < 12; ++id) {
    clients.emplace_back([&, id] {
      const int64_t count = 1 + id % 5;  // 33 images in all
      const std::vector<float> latents = latents_of(id, count);
      std::vector<float> images(static_cast<size_t>(count * kValues));
      batcher.generate(latents.data(), count, images.data());
      if (images_match(id, count, images)) ++right;
    });
  }
  for (std::thread& t : clients) t.join();
  CHECK(right == 12);
  CHECK(reported == 33);
  std::lock_guard<std::mutex> lock(recorder->mutex);
  int64_t total = 0;
  for (int64_t b : recorder->batches) {
    CHECK(b <= 16);
    total += b;
  }
  CHECK(total == 33);
  CHECK(recorder->batches.size() < 12);  // merged: fewer batches than requests
}

TEST_CASE("batcher: a request larger than a batch is split, over several workers") {
  std::vector<std::unique_ptr<Backend>> backends;
  for (int k = 0; k < 3; ++k) backends.push_back(std::make_unique<RecordingBackend>());
  Batcher batcher(std::move(backends), options(4, 0));
  CHECK(batcher.workers() == 3);
  const std::vector<float> latents = latents_of(3, 37);
  std::vector<float> images(37 * kValues);
  batcher.generate(latents.data(), 37, images.data());
  CHECK(images_match(3, 37, images));
}

TEST_CASE("batcher: a full queue refuses, a failed batch fails its requests, stop finishes the queue") {
  auto backend = std::make_unique<RecordingBackend>();
  RecordingBackend* recorder = backend.get();
  recorder->delay_ms = 100;
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(std::move(backend));
  Batcher batcher(std::move(backends), options(8, 0, 10));
  const std::vector<float> latents = latents_of(1, 10);
  std::vector<float> images(10 * kValues);
  std::thread first([&] { batcher.generate(latents.data(), 8, images.data()); });  // taken, computing
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  std::vector<float> more(10 * kValues);
  std::thread second([&] { batcher.generate(latents.data(), 8, more.data()); });   // queued: 8 of 10
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  std::vector<float> extra(3 * kValues);
  CHECK_THROWS_AS(batcher.generate(latents.data(), 3, extra.data()), QueueFull);
  first.join();
  second.join();
  CHECK(images_match(1, 8, more));
  recorder->fail = true;
  CHECK_THROWS_WITH(batcher.generate(latents.data(), 2, extra.data()), "the backend failed");
  recorder->fail = false;
  batcher.stop();
  CHECK_THROWS(batcher.generate(latents.data(), 2, extra.data()));
}

// Requests from `clients` threads, each of 1 + id % 7 images, on a batcher over one LookaheadBackend:
// the number whose images came back right and the number refused with the stream's failure, within
// a deadline (a batch the stream holds but never delivers would leave its request waiting for ever).
struct StreamRun {
  int right = 0, failed = 0;
};
StreamRun stream_clients(Batcher& batcher, int clients, int first_id) {
  std::vector<std::future<int>> results;  // 1 right, 0 wrong, -1 refused by the failure
  for (int id = first_id; id < first_id + clients; ++id) {
    results.push_back(std::async(std::launch::async, [&batcher, id] {
      const int64_t count = 1 + id % 7;
      const std::vector<float> latents = latents_of(id, count);
      std::vector<float> images(static_cast<size_t>(count * kValues));
      try {
        batcher.generate(latents.data(), count, images.data());
      } catch (const std::runtime_error& e) {
        return std::string(e.what()) == "the stream failed" ? -1 : 0;
      }
      return images_match(id, count, images) ? 1 : 0;
    }));
  }
  StreamRun run;
  for (auto& result : results) {
    REQUIRE(result.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
    const int got = result.get();
    run.right += got == 1;
    run.failed += got == -1;
  }
  return run;
}

TEST_CASE("batcher: a stream that asks for batches ahead delivers every request, a failure fails its batches only") {
  auto backend = std::make_unique<LookaheadBackend>();
  LookaheadBackend* stream = backend.get();
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(std::move(backend));
  Batcher batcher(std::move(backends), options(5, 0));
  SUBCASE("one request alone: the stream ends with the queue, and the request is answered") {
    const StreamRun run = stream_clients(batcher, 1, 3);
    CHECK(run.right == 1);
  }
  SUBCASE("40 concurrent requests, 165 images in batches of at most 5") {
    const StreamRun run = stream_clients(batcher, 40, 100);
    CHECK(run.right == 40);
    CHECK(stream->streamed >= 165 / 5);
  }
  SUBCASE("the stream fails at its 3rd batch: some requests fail, the rest are right, and the next ones are served") {
    stream->fail_at = 3;
    const StreamRun run = stream_clients(batcher, 30, 200);
    CHECK(run.failed >= 1);
    CHECK(run.right + run.failed == 30);
    CHECK(stream_clients(batcher, 10, 300).right == 10);
  }
}

// ---- Requests told when their images are made, with pieces of the workers' slots ----------------

namespace {

// fake_images, made only in the encodings it is told it makes (as a CUDA backend built for one).
class OneEncodingBackend : public RecordingBackend {
 public:
  explicit OneEncodingBackend(ImageEncoding only) : only_(only) {}
  bool makes(ImageEncoding encoding) const override { return encoding == only_; }
  void generate_checked(const float* latents, int64_t n, const ImageTarget& out, int threads) override {
    CHECK(out.encoding == only_);
    Backend::generate_checked(latents, n, out, threads);
  }

 private:
  ImageEncoding only_;
};

// The images (count, size, size, 1) a request of `count` latents of request `id` must get, in
// `product`'s bytes.
std::vector<unsigned char> expected_bytes(int id, int64_t count, ImageProduct product, int size = kSize) {
  const std::vector<float> latents = latents_of(id, count);
  const int64_t values = int64_t{size} * size, pixel_bytes = rgb8_image_bytes(size);
  std::vector<float> floats(static_cast<size_t>(count * values));
  fake_images(latents.data(), count, floats.data(), values);
  if (product == ImageProduct::Floats) {
    std::vector<unsigned char> bytes(floats.size() * sizeof(float));
    std::memcpy(bytes.data(), floats.data(), bytes.size());
    return bytes;
  }
  std::vector<unsigned char> pixels(static_cast<size_t>(count * pixel_bytes));
  for (int64_t i = 0; i < count; ++i) image_to_rgb8(floats.data() + i * values, 1, size, pixels.data() + i * pixel_bytes);
  return pixels;
}

// A request submitted and waited for (a deadline: a request never told fails the test).
struct Waited {
  MadeImages made;
  int calls = 0;
  std::thread::id thread;
};
Waited submit_and_wait(Batcher& batcher, const std::vector<float>& latents, int64_t count, ImageProduct product) {
  std::mutex mutex;
  std::condition_variable told;
  Waited waited;
  batcher.submit(latents.data(), count, product, [&](MadeImages made) {
    std::lock_guard<std::mutex> lock(mutex);
    waited.made = std::move(made);
    waited.thread = std::this_thread::get_id();
    ++waited.calls;
    told.notify_one();
  });
  std::unique_lock<std::mutex> lock(mutex);
  REQUIRE(told.wait_for(lock, std::chrono::seconds(60), [&] { return waited.calls > 0; }));
  return std::move(waited);
}

// The pieces cover [0, count) in order, and their bytes are `want`.
bool pieces_hold(const MadeImages& made, int64_t count, size_t image_bytes, const std::vector<unsigned char>& want) {
  int64_t next = 0;
  for (const ImagePiece& piece : made.pieces) {
    if (piece.first != next || piece.count < 1 || !piece.hold) return false;
    if (std::memcmp(piece.images, want.data() + piece.first * image_bytes, static_cast<size_t>(piece.count) * image_bytes) != 0) return false;
    next += piece.count;
  }
  return next == count;
}

std::vector<std::unique_ptr<Backend>> backends_of(std::unique_ptr<Backend> a, std::unique_ptr<Backend> b = nullptr) {
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(std::move(a));
  if (b) backends.push_back(std::move(b));
  return backends;
}

}  // namespace

TEST_CASE("batcher: each product comes back as pieces of the slots, told once, on a worker's thread") {
  for (const int size : kImageSizes) {  // the models' image sizes
    for (const ImageProduct product : {ImageProduct::Floats, ImageProduct::Pixels, ImageProduct::Png}) {
      CAPTURE(size);
      CAPTURE(static_cast<int>(product));
      auto first = std::make_unique<RecordingBackend>(), second = std::make_unique<RecordingBackend>();
      first->size = second->size = size;
      Batcher batcher(backends_of(std::move(first), std::move(second)), options(5, 0, 1 << 20, size));
      for (int64_t count : {int64_t{1}, int64_t{5}, int64_t{13}}) {  // one batch; a full one; split over several
        CAPTURE(count);
        const int id = static_cast<int>(count);
        const Waited waited = submit_and_wait(batcher, latents_of(id, count), count, product);
        CHECK(waited.calls == 1);
        CHECK((waited.thread != std::this_thread::get_id()));
        CHECK(!waited.made.error);
        CHECK(waited.made.product == product);
        CHECK(!waited.made.non_finite());
        const int64_t pixel_bytes = rgb8_image_bytes(size);
        const size_t image_bytes = product == ImageProduct::Floats ? size * size * sizeof(float) : pixel_bytes;
        const std::vector<unsigned char> want = expected_bytes(id, count, product, size);
        CHECK(pieces_hold(waited.made, count, image_bytes, want));
        std::vector<unsigned char> gathered(want.size(), 0xA5);
        waited.made.copy_to(gathered.data(), image_bytes);
        CHECK(gathered == want);
        if (product == ImageProduct::Png) {  // each image's PNG: the png format's file of its pixels
          for (const ImagePiece& piece : waited.made.pieces) {
            for (int64_t k = 0; k < piece.count; ++k) {
              std::string png;
              encode_tile_png(want.data() + (piece.first + k) * pixel_bytes, size, 0, png);
              CHECK(std::string(piece.png + k * piece.png_stride, piece.png_bytes[k]) == png);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("batcher: PNGs at a compressing level are the png format's at that level") {
  BatcherOptions o = options(4, 0);
  o.png_level = 6;
  Batcher batcher(backends_of(std::make_unique<RecordingBackend>()), o);
  const Waited waited = submit_and_wait(batcher, latents_of(9, 7), 7, ImageProduct::Png);
  const std::vector<unsigned char> want = expected_bytes(9, 7, ImageProduct::Pixels);
  int checked = 0;
  for (const ImagePiece& piece : waited.made.pieces) {
    for (int64_t k = 0; k < piece.count; ++k, ++checked) {
      std::string png;
      encode_tile_png(want.data() + (piece.first + k) * kPixelBytes, kSize, 6, png);
      CHECK(std::string(piece.png + k * piece.png_stride, piece.png_bytes[k]) == png);
    }
  }
  CHECK(checked == 7);
}

TEST_CASE("batcher: a backend of one encoding: float32 only makes pixels too (on the host), pixels only takes no float32") {
  SUBCASE("float32 only: pixels converted on the worker's thread, the same bytes") {
    Batcher batcher(backends_of(std::make_unique<OneEncodingBackend>(ImageEncoding::Float32)), options(4, 0));
    CHECK(batcher.makes(ImageProduct::Pixels));
    for (const ImageProduct product : {ImageProduct::Pixels, ImageProduct::Png, ImageProduct::Floats}) {
      const Waited waited = submit_and_wait(batcher, latents_of(5, 9), 9, product);
      const size_t image_bytes = product == ImageProduct::Floats ? kValues * sizeof(float) : kPixelBytes;
      CHECK(pieces_hold(waited.made, 9, image_bytes, expected_bytes(5, 9, product)));
    }
  }
  SUBCASE("pixels only: float32 refused at once, pixels made; beside a float32 worker, float32 made by it") {
    Batcher alone(backends_of(std::make_unique<OneEncodingBackend>(ImageEncoding::Rgb8)), options(4, 0));
    CHECK(!alone.makes(ImageProduct::Floats));
    const std::vector<float> latents = latents_of(1, 3);
    CHECK_THROWS_AS(alone.submit(latents.data(), 3, ImageProduct::Floats, [](MadeImages) { FAIL("told"); }), std::logic_error);
    CHECK(pieces_hold(submit_and_wait(alone, latents, 3, ImageProduct::Pixels).made, 3, kPixelBytes, expected_bytes(1, 3, ImageProduct::Pixels)));
    Batcher both(backends_of(std::make_unique<OneEncodingBackend>(ImageEncoding::Rgb8), std::make_unique<OneEncodingBackend>(ImageEncoding::Float32)),
                 options(4, 0));
    for (int round = 0; round < 5; ++round) {
      CHECK(pieces_hold(submit_and_wait(both, latents, 3, ImageProduct::Floats).made, 3, kValues * sizeof(float), expected_bytes(1, 3, ImageProduct::Floats)));
      CHECK(pieces_hold(submit_and_wait(both, latents, 3, ImageProduct::Pixels).made, 3, kPixelBytes, expected_bytes(1, 3, ImageProduct::Pixels)));
    }
  }
}

TEST_CASE("batcher: held pieces keep their bytes while later batches run; let go, their slot is used again") {
  Batcher batcher(backends_of(std::make_unique<RecordingBackend>()), options(4, 0));
  Waited held = submit_and_wait(batcher, latents_of(1, 3), 3, ImageProduct::Pixels);
  const std::vector<unsigned char> want = expected_bytes(1, 3, ImageProduct::Pixels);
  const void* held_at = held.made.pieces.at(0).images;
  for (int id = 2; id < 40; ++id) {
    const Waited other = submit_and_wait(batcher, latents_of(id, 3), 3, ImageProduct::Pixels);
    CHECK(other.made.pieces.at(0).images != held_at);  // never the held slot
  }
  CHECK(pieces_hold(held.made, 3, kPixelBytes, want));
  held.made.pieces.clear();  // let go: the slot goes back to the worker
  bool reused = false;
  for (int id = 40; id < 80 && !reused; ++id) reused = submit_and_wait(batcher, latents_of(id, 3), 3, ImageProduct::Pixels).made.pieces.at(0).images == held_at;
  CHECK(reused);
}

TEST_CASE("batcher: a non-finite image is flagged, a failed backend fails its requests only") {
  auto backend = std::make_unique<RecordingBackend>();
  RecordingBackend* recorder = backend.get();
  Batcher batcher(backends_of(std::move(backend)), options(8, 0));
  std::vector<float> latents = latents_of(3, 4);
  latents[2 * kNz] = std::numeric_limits<float>::quiet_NaN();  // image 2's value 1 is NaN
  CHECK(submit_and_wait(batcher, latents, 4, ImageProduct::Pixels).made.non_finite());
  CHECK(!submit_and_wait(batcher, latents_of(3, 4), 4, ImageProduct::Pixels).made.non_finite());
  recorder->fail = true;
  const Waited failed = submit_and_wait(batcher, latents_of(3, 4), 4, ImageProduct::Png);
  CHECK(failed.made.error);
  CHECK(failed.made.pieces.empty());
  recorder->fail = false;
  CHECK(!submit_and_wait(batcher, latents_of(3, 4), 4, ImageProduct::Png).made.error);
}

TEST_CASE("batcher: many requests of every product at once, over three workers, each told once with its own images") {
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(std::make_unique<RecordingBackend>());
  backends.push_back(std::make_unique<OneEncodingBackend>(ImageEncoding::Float32));
  backends.push_back(std::make_unique<LookaheadBackend>());
  Batcher batcher(std::move(backends), options(6, 0));
  std::vector<std::future<bool>> results;
  for (int id = 0; id < 60; ++id) {
    results.push_back(std::async(std::launch::async, [&batcher, id] {
      const ImageProduct product = static_cast<ImageProduct>(id % 3);
      const int64_t count = 1 + id % 11;
      const Waited waited = submit_and_wait(batcher, latents_of(id, count), count, product);
      const size_t image_bytes = product == ImageProduct::Floats ? kValues * sizeof(float) : kPixelBytes;
      return waited.calls == 1 && !waited.made.error && pieces_hold(waited.made, count, image_bytes, expected_bytes(id, count, product));
    }));
  }
  int right = 0;
  for (auto& result : results) {
    REQUIRE(result.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
    right += result.get();
  }
  CHECK(right == 60);
}
