// test_batcher.cpp: the batcher (serve/batcher.hpp) over backends made here: one that records its
// batches (the default stream, a batch at a time) and one whose stream asks for batches ahead of the
// one it delivers, as the CUDA pipeline's does. Concurrent requests are merged into batches of at
// most max_batch images, a request larger than that is split, every request gets its own images back
// whatever batch made them, a full queue refuses at once, a backend's failure reaches the requests of
// its batches (and the worker goes on), stop() finishes queued work.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "serve/batcher.hpp"

using namespace facegen;
using namespace facegen::serve;

namespace {

constexpr int kNz = 2;
constexpr int64_t kValues = 4096;  // floats per image: 64 x 64, one channel

// Image i of latents (n, nz): (latent[0] + latent[1], latent[0], 7, 0, 0, ...).
void fake_images(const float* latents, int64_t n, float* images) {
  std::memset(images, 0, static_cast<size_t>(n * kValues) * sizeof(float));
  for (int64_t i = 0; i < n; ++i) {
    images[i * kValues + 0] = latents[i * kNz] + latents[i * kNz + 1];
    images[i * kValues + 1] = latents[i * kNz];
    images[i * kValues + 2] = 7;
  }
}

// fake_images, recording each batch's size.
class RecordingBackend : public Backend {
 public:
  std::string describe() const override { return "recording"; }
  void generate(const float* latents, int64_t n, float* images) override {
    if (fail) throw std::runtime_error("the backend failed");
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    fake_images(latents, n, images);
    std::lock_guard<std::mutex> lock(mutex);
    batches.push_back(n);
  }
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

BatcherOptions options(int64_t max_batch, double delay_ms, int64_t max_queue = 1 << 20) {
  BatcherOptions o;
  o.max_batch = max_batch;
  o.max_delay_ms = delay_ms;
  o.max_queue = max_queue;
  o.latent_dim = kNz;
  o.image_channels = 1;
  o.image_size = 64;  // kValues
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
