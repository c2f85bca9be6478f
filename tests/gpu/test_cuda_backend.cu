// test_cuda_backend.cu: the CUDA backend (the program's GPU path) against the CPU backend end to
// end, through the same Backend interface the pipeline uses.
//
// Fresh seeded random networks and latents for every check, batch sizes 1, 3, 127 and 1000.
// Tolerance |got - ref| <= atol + rtol * |ref|, with the first few mismatches printed. The kernels
// themselves are tested layer by layer in test_generator_gpu.cu. Runs only where a CUDA device is
// usable (see test_main.cpp).
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "generator/backend.hpp"
#include "generator/network.hpp"

namespace facegen {
namespace {

constexpr int kCpuThreads = 0;  // all hardware threads for the CPU references

std::vector<float> random_floats(std::mt19937_64& rng, int64_t count, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(count);
  for (float& x : v) x = dist(rng);
  return v;
}

// |got - ref| <= atol + rtol * |ref| everywhere; prints the first few mismatches.
void check_close(const std::vector<float>& got, const std::vector<float>& ref, double atol,
                 double rtol, const std::string& what) {
  REQUIRE(got.size() == ref.size());
  int64_t bad = 0;
  double worst = 0;
  std::ostringstream report;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - double(ref[i]));
    worst = std::max(worst, err);
    if (!(err <= atol + rtol * std::fabs(double(ref[i])))) {  // NaN fails too
      if (bad < 5) report << "\n  [" << i << "] got " << got[i] << ", expected " << ref[i];
      ++bad;
    }
  }
  INFO(what << ": " << bad << " of " << got.size() << " values out of tolerance (largest error "
            << worst << ")" << report.str());
  CHECK(bad == 0);
}

// Seeded random weights at scales that keep activations O(1), so tanh is not saturated.
Network random_test_network(uint64_t seed) {
  std::mt19937_64 rng(seed);
  Network net;
  std::vector<float>& f = net.mutable_floats();
  auto fill = [&](int64_t offset, int64_t count, float lo, float hi) {
    std::uniform_real_distribution<float> dist(lo, hi);
    for (int64_t i = 0; i < count; ++i) f[offset + i] = dist(rng);
  };
  const float proj_scale = std::sqrt(3.0f / kLatentDim);
  fill(net.proj_weight_offset(), int64_t(kLatentDim) * kProjOutputs, -proj_scale, proj_scale);
  fill(net.proj_bias_offset(), kProjOutputs, -0.1f, 0.1f);
  for (int s = 0; s < kNumStages; ++s) {
    const int c = kStageChannels[s], c_out = kStageChannels[s + 1];
    const int64_t bn = net.batchnorm_offset(s);
    fill(bn, c, -0.2f, 0.2f);          // beta
    fill(bn + c, c, 0.7f, 1.3f);       // gamma
    fill(bn + 2 * c, c, -0.2f, 0.2f);  // mean
    fill(bn + 3 * c, c, 0.5f, 1.5f);   // var
    const float scale = std::sqrt(4.0f / (c * 6.25f));
    fill(net.tconv_weight_offset(s), 25 * int64_t(c_out) * c, -scale, scale);
    fill(net.tconv_bias_offset(s), c_out, -0.1f, 0.1f);
  }
  return net;
}

TEST_CASE("CUDA backend matches the CPU backend within 1e-5 on every value") {
  const Network net = random_test_network(9);
  BackendOptions options;
  options.threads = kCpuThreads;
  options.max_batch = 128;  // 1000 images: seven full batches and a ragged one
  options.device = DeviceKind::Cpu;
  auto cpu = make_cpu_backend(net, options);
  options.device = DeviceKind::Cuda;
  auto gpu = make_cuda_backend(net, options);
  MESSAGE("comparing " << gpu->describe() << " against " << cpu->describe());
  std::mt19937_64 rng(206);
  // FACEGEN_GPU_TEST_MAX_BATCH caps the sizes here too (compute-sanitizer runs, tests/sanitize_gpu.sh).
  const char* cap_text = std::getenv("FACEGEN_GPU_TEST_MAX_BATCH");
  const int64_t cap = cap_text ? std::atoll(cap_text) : 1000;
  for (int64_t n : {1, 3, 127, 1000}) {
    if (n > cap) break;
    const auto latents = random_floats(rng, n * kLatentDim, -1, 1);
    std::vector<float> ref(n * kImageValues), got(n * kImageValues,
                                                   std::numeric_limits<float>::quiet_NaN());
    cpu->generate(latents.data(), n, ref.data());
    gpu->generate(latents.data(), n, got.data());
    check_close(got, ref, 1e-5, 0, "n=" + std::to_string(n) + " CUDA backend vs CPU backend");
  }
}

TEST_CASE("CUDA backend results do not depend on the batch size") {
  const Network net = random_test_network(10);
  std::mt19937_64 rng(207);
  const int64_t n = 5;
  const auto latents = random_floats(rng, n * kLatentDim, -1, 1);
  BackendOptions options;
  options.device = DeviceKind::Cuda;
  std::vector<std::vector<float>> results;
  for (int max_batch : {1, 2, 512}) {
    options.max_batch = max_batch;
    auto gpu = make_cuda_backend(net, options);
    results.emplace_back(n * kImageValues, std::numeric_limits<float>::quiet_NaN());
    gpu->generate(latents.data(), n, results.back().data());
  }
  CHECK(results[0] == results[1]);
  CHECK(results[0] == results[2]);
}

TEST_CASE("CUDA backend runs networks other than the SHPC one and matches the CPU backend") {
  // The tutorial's generator (the fixed-shape kernels, 4x4), a grey one, and one with biases, 5x5
  // kernels and an nz that is not a multiple of 4 (the any-shape kernels), behind the same Backend.
  const ModelSpec specs[] = {{100, 64, 3, 4, false}, {128, 32, 1, 4, false}, {7, 16, 1, 5, true}};
  const char* cap_text = std::getenv("FACEGEN_GPU_TEST_MAX_BATCH");
  const int64_t cap = cap_text ? std::atoll(cap_text) : 1000;
  uint64_t seed = 300;
  for (const ModelSpec& spec : specs) {
    const Network net = make_random_network(spec, ++seed);
    BackendOptions options;
    options.threads = kCpuThreads;
    options.max_batch = 64;  // 127 images: a full batch and a ragged one
    options.device = DeviceKind::Cpu;
    auto cpu = make_cpu_backend(net, options);
    options.device = DeviceKind::Cuda;
    auto gpu = make_cuda_backend(net, options);
    std::mt19937_64 rng(seed);
    for (int64_t n : {1, 3, 127}) {
      if (n > cap) break;
      const auto latents = random_floats(rng, n * spec.latent_dim, -1, 1);
      std::vector<float> ref(n * spec.image_values()),
          got(n * spec.image_values(), std::numeric_limits<float>::quiet_NaN());
      cpu->generate(latents.data(), n, ref.data());
      gpu->generate(latents.data(), n, got.data());
      check_close(got, ref, 1e-5, 0, describe_spec(spec) + ", n=" + std::to_string(n) + ": CUDA backend vs CPU backend");
    }
  }
}

TEST_CASE("CUDA backend: a stream of jobs gives each job generate_checked's bytes, in order, with no drain between") {
  // Jobs of odd sizes around the batch (1, 2, 63, 64, 65, 130, 7), each into a poisoned target of its
  // own, in float32 (fp32, tf32), float32 widened from float16 (bf16) and 8-bit pixels: every byte
  // and flag equals generate_checked's on the same latents, and done() comes once per job, in order.
  // Every other job's target is the backend's page-locked memory (allocate_host), which the downloads
  // land in straight; the others are plain memory, copied into.
  const Network net = random_test_network(12);
  const int64_t sizes[] = {1, 2, 63, 64, 65, 130, 7};
  const char* cap_text = std::getenv("FACEGEN_GPU_TEST_MAX_BATCH");
  const int64_t cap = cap_text ? std::atoll(cap_text) : 1000;
  for (Precision precision : {Precision::Fp32, Precision::Tf32, Precision::Bf16}) {
    for (ImageEncoding encoding : {ImageEncoding::Float32, ImageEncoding::Rgb8}) {
      BackendOptions options;
      options.device = DeviceKind::Cuda;
      options.max_batch = 64;
      options.precision = precision;
      options.images = encoding;
      auto gpu = make_cuda_backend(net, options);
      const int64_t bytes_per_image = image_bytes(encoding, 3, 64);
      std::mt19937_64 rng(400 + static_cast<int>(precision) * 2 + static_cast<int>(encoding));
      struct Job {
        std::vector<float> latents;
        std::vector<unsigned char> want;
        std::vector<uint8_t> want_flags;
        HostBuffer got{nullptr, nullptr}, got_flags{nullptr, nullptr};
        int64_t n = 0;
      };
      std::vector<Job> jobs;
      for (int64_t n : sizes) {
        if (n > cap) continue;
        Job job;
        job.n = n;
        job.latents = random_floats(rng, n * kLatentDim, -1, 1);
        job.want.assign(static_cast<size_t>(n * bytes_per_image), 0xAB);
        job.want_flags.assign(static_cast<size_t>(n), 0xEE);
        const bool locked = jobs.size() % 2 == 1;
        job.got = locked ? gpu->allocate_host(static_cast<size_t>(n * bytes_per_image)) : plain_host_buffer(static_cast<size_t>(n * bytes_per_image));
        job.got_flags = locked ? gpu->allocate_host(static_cast<size_t>(n)) : plain_host_buffer(static_cast<size_t>(n));
        std::memset(job.got.get(), 0xCD, static_cast<size_t>(n * bytes_per_image));
        std::memset(job.got_flags.get(), 0x77, static_cast<size_t>(n));
        gpu->generate_checked(job.latents.data(), n, {encoding, job.want.data(), job.want_flags.data(), kLatentDim, 3, 64}, 0);
        jobs.push_back(std::move(job));
      }
      size_t next = 0, done = 0;
      bool in_order = true;
      gpu->generate_stream(
          [&](StreamJob& job) {
            if (next == jobs.size()) return false;
            Job& j = jobs[next++];
            job = StreamJob{j.latents.data(), j.n, {encoding, j.got.get(), static_cast<uint8_t*>(j.got_flags.get()), kLatentDim, 3, 64}};
            return true;
          },
          [&](const StreamJob& job) {
            in_order &= done < jobs.size() && job.out.images == jobs[done].got.get();
            ++done;
          },
          0);
      INFO("precision " << precision_name(precision) << ", " << (encoding == ImageEncoding::Rgb8 ? "8-bit" : "float32"));
      CHECK(in_order);
      CHECK(done == jobs.size());
      for (size_t k = 0; k < jobs.size(); ++k) {
        INFO("job " << k << " of " << jobs[k].n << " images, " << (k % 2 ? "page-locked" : "plain") << " target");
        CHECK(std::memcmp(jobs[k].got.get(), jobs[k].want.data(), jobs[k].want.size()) == 0);
        CHECK(std::memcmp(jobs[k].got_flags.get(), jobs[k].want_flags.data(), jobs[k].want_flags.size()) == 0);
      }
    }
  }
}

TEST_CASE("make_backend picks CUDA, and a bad device index is a clear error") {
  const Network net;  // zeros are enough to build backends
  std::string why_none;
  const int count = cuda_device_count(&why_none);
  REQUIRE(count > 0);

  BackendOptions options;
  options.device = DeviceKind::Auto;
  std::string notice = "unchanged";
  auto backend = make_backend(net, options, &notice);
  CHECK(backend->describe().rfind("CUDA 0: ", 0) == 0);
  CHECK(notice.empty());

  options.device = DeviceKind::Cuda;
  options.cuda_device = count;  // one past the last
  const std::string expected = "CUDA device " + std::to_string(count) + " was requested";
  CHECK_THROWS_WITH_AS(make_backend(net, options, &notice), doctest::Contains(expected.c_str()),
                       std::runtime_error);
  options.cuda_device = -7;
  CHECK_THROWS_AS(make_cuda_backend(net, options), std::runtime_error);
  options.cuda_device = 0;
  options.max_batch = 0;
  CHECK_THROWS_AS(make_cuda_backend(net, options), std::runtime_error);
}

}  // namespace
}  // namespace facegen
