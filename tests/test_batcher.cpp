// test_batcher.cpp: the batcher (serve/batcher.hpp) over a backend made here that records its
// batches: concurrent requests are merged into batches of at most max_batch images, a request larger
// than that is split, every request gets its own images back whatever batch made them, a full queue
// refuses at once, a backend's failure reaches the requests of its batch, stop() finishes queued work.
#include <doctest/doctest.h>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "serve/batcher.hpp"

using namespace facegen;
using namespace facegen::serve;

namespace {

constexpr int kNz = 2;
constexpr int64_t kValues = 3;  // floats per "image"

// Image k of a batch: (latent[0] + latent[1], latent[0], 7); records each batch's size.
class RecordingBackend : public Backend {
 public:
  std::string describe() const override { return "recording"; }
  void generate(const float* latents, int64_t n, float* images) override {
    if (fail) throw std::runtime_error("the backend failed");
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    for (int64_t i = 0; i < n; ++i) {
      images[i * kValues + 0] = latents[i * kNz] + latents[i * kNz + 1];
      images[i * kValues + 1] = latents[i * kNz];
      images[i * kValues + 2] = 7;
    }
    std::lock_guard<std::mutex> lock(mutex);
    batches.push_back(n);
  }
  std::mutex mutex;
  std::vector<int64_t> batches;
  std::atomic<bool> fail{false};
  int delay_ms = 0;
};

BatcherOptions options(int64_t max_batch, double delay_ms, int64_t max_queue = 1 << 20) {
  BatcherOptions o;
  o.max_batch = max_batch;
  o.max_delay_ms = delay_ms;
  o.max_queue = max_queue;
  o.latent_dim = kNz;
  o.image_values = kValues;
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
