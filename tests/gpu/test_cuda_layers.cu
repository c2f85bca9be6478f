// test_cuda_layers.cu: every CUDA layer against its CPU twin, and the CUDA backend against the CPU
// backend end to end.
//
// Fresh seeded random inputs for every check; device outputs are filled with NaN bytes first, so an
// element a kernel leaves unwritten fails. Batch sizes 1, 3 and 127 everywhere, 1000 where the
// layer is cheap enough for the CPU reference. Tolerance |got - ref| <= atol + rtol * |ref|, with
// the first few mismatches printed. Runs only where a CUDA device is usable (see test_main.cpp).
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "generator/backend.hpp"
#include "generator/network.hpp"
#include "kernels/cuda_check.cuh"
#include "kernels/layers_cpu.hpp"
#include "kernels/layers_cuda.hpp"

namespace facegen {
namespace {

constexpr int kCpuThreads = 0;  // all hardware threads for the CPU references

std::vector<float> random_floats(std::mt19937_64& rng, int64_t count, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(count);
  for (float& x : v) x = dist(rng);
  return v;
}

// count floats of device memory, filled with NaN (all bits set) until written.
class DeviceArray {
 public:
  explicit DeviceArray(int64_t count) : count_(count) {
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), bytes()));
    CUDA_CHECK(cudaMemset(ptr_, 0xFF, bytes()));
  }
  explicit DeviceArray(const std::vector<float>& host) : DeviceArray(int64_t(host.size())) {
    CUDA_CHECK(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice));
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(ptr_); }

  float* get() const { return ptr_; }
  std::vector<float> download() const {
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> host(count_);
    CUDA_CHECK(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  size_t bytes() const { return sizeof(float) * count_; }
  float* ptr_ = nullptr;
  int64_t count_;
};

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

std::string sizes(int64_t n, const std::string& rest) {
  return "n=" + std::to_string(n) + " " + rest;
}

TEST_CASE("projection_cuda matches projection_cpu") {
  std::mt19937_64 rng(201);
  struct Shape { int64_t n; int k_in, k_out; };
  const Shape shapes[] = {{1, 1, 1}, {3, 7, 5}, {1, 100, 8192}, {3, 100, 8192},
                          {127, 100, 8192}, {1000, 100, 8192}};
  for (const Shape& s : shapes) {
    const auto z = random_floats(rng, s.n * s.k_in, -1, 1);
    const auto weight = random_floats(rng, int64_t(s.k_in) * s.k_out, -0.2f, 0.2f);
    const auto bias = random_floats(rng, s.k_out, -0.5f, 0.5f);
    std::vector<float> ref(s.n * s.k_out);
    projection_cpu(z.data(), s.n, s.k_in, s.k_out, weight.data(), bias.data(), ref.data(),
                   kCpuThreads);
    DeviceArray dz(z), dw(weight), db(bias), dout(s.n * s.k_out);
    projection_cuda(dz.get(), s.n, s.k_in, s.k_out, dw.get(), db.get(), dout.get(), nullptr);
    check_close(dout.download(), ref, 1e-6, 1e-5,
                sizes(s.n, "projection k_in=" + std::to_string(s.k_in) +
                               " k_out=" + std::to_string(s.k_out)));
  }
}

TEST_CASE("batchnorm_relu_cuda matches batchnorm_relu_cpu, in place too") {
  std::mt19937_64 rng(202);
  for (int s = 0; s < kNumStages; ++s)
    for (int64_t n : {1, 3, 127, 1000}) {
      const int channels = kStageChannels[s];
      const int64_t pixels = n * kStageSize[s] * kStageSize[s];
      const auto in = random_floats(rng, pixels * channels, -3, 3);
      const auto beta = random_floats(rng, channels, -1, 1);
      const auto gamma = random_floats(rng, channels, -2, 2);
      const auto mean = random_floats(rng, channels, -1, 1);
      const auto var = random_floats(rng, channels, 0.01f, 3);
      std::vector<float> ref(in.size());
      batchnorm_relu_cpu(in.data(), pixels, channels, beta.data(), gamma.data(), mean.data(),
                         var.data(), ref.data(), kCpuThreads);
      DeviceArray din(in), dbeta(beta), dgamma(gamma), dmean(mean), dvar(var);
      DeviceArray dout(pixels * channels);
      batchnorm_relu_cuda(din.get(), pixels, channels, dbeta.get(), dgamma.get(), dmean.get(),
                          dvar.get(), dout.get(), nullptr);
      const std::string what = sizes(n, "batchnorm_relu stage " + std::to_string(s));
      check_close(dout.download(), ref, 1e-6, 1e-6, what);
      batchnorm_relu_cuda(din.get(), pixels, channels, dbeta.get(), dgamma.get(), dmean.get(),
                          dvar.get(), din.get(), nullptr);
      check_close(din.download(), ref, 1e-6, 1e-6, what + " in place");
    }
}

void check_tconv(std::mt19937_64& rng, int64_t n, int h, int w, int c_in, int c_out) {
  const float scale = 1.0f / std::sqrt(float(c_in) * 6.25f);
  const auto in = random_floats(rng, n * h * w * c_in, -1, 1);
  const auto weight = random_floats(rng, 25 * int64_t(c_out) * c_in, -scale, scale);
  const auto bias = random_floats(rng, c_out, -0.5f, 0.5f);
  const int64_t out_count = n * 4 * h * w * c_out;
  std::vector<float> ref(out_count);
  tconv_cpu(in.data(), n, h, w, c_in, weight.data(), bias.data(), c_out, ref.data(), kCpuThreads);
  std::vector<float> weight_t(weight.size());
  tconv_weight_for_cuda(weight.data(), c_in, c_out, weight_t.data());
  DeviceArray din(in), dw(weight_t), db(bias), dout(out_count);
  tconv_cuda(din.get(), n, h, w, c_in, dw.get(), db.get(), c_out, dout.get(), nullptr);
  std::ostringstream what;
  what << "tconv h=" << h << " w=" << w << " c_in=" << c_in << " c_out=" << c_out;
  check_close(dout.download(), ref, 1e-5, 1e-5, sizes(n, what.str()));
}

TEST_CASE("tconv_cuda matches tconv_cpu on odd sizes") {
  std::mt19937_64 rng(203);
  for (int64_t n : {1, 3})
    for (int h : {1, 3, 4})
      for (int c_in : {1, 7, 33})
        for (int c_out : {1, 3, 5}) check_tconv(rng, n, h, h, c_in, c_out);
  check_tconv(rng, 3, 3, 1, 7, 5);
  check_tconv(rng, 127, 2, 5, 17, 9);
}

TEST_CASE("tconv_cuda matches tconv_cpu at the network's sizes") {
  std::mt19937_64 rng(204);
  for (int s = 0; s < kNumStages; ++s) {
    std::vector<int64_t> batches = {1, 3, 127};
    if (s == kNumStages - 1) batches.push_back(1000);  // the cheap last layer: a big batch too
    for (int64_t n : batches)
      check_tconv(rng, n, kStageSize[s], kStageSize[s], kStageChannels[s], kStageChannels[s + 1]);
  }
}

TEST_CASE("tanh_cuda matches tanh_cpu") {
  std::mt19937_64 rng(205);
  for (int64_t n : {1, 3, 127, 1000}) {
    const auto in = random_floats(rng, n * kImageValues, -6, 6);
    std::vector<float> ref(in.size());
    tanh_cpu(in.data(), int64_t(in.size()), ref.data(), kCpuThreads);
    DeviceArray din(in), dout(int64_t(in.size()));
    tanh_cuda(din.get(), int64_t(in.size()), dout.get(), nullptr);
    check_close(dout.download(), ref, 1e-6, 1e-6, sizes(n, "tanh"));
  }
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
  fill(Network::proj_weight_offset(), int64_t(kLatentDim) * kProjOutputs, -proj_scale, proj_scale);
  fill(Network::proj_bias_offset(), kProjOutputs, -0.1f, 0.1f);
  for (int s = 0; s < kNumStages; ++s) {
    const int c = kStageChannels[s], c_out = kStageChannels[s + 1];
    const int64_t bn = Network::batchnorm_offset(s);
    fill(bn, c, -0.2f, 0.2f);          // beta
    fill(bn + c, c, 0.7f, 1.3f);       // gamma
    fill(bn + 2 * c, c, -0.2f, 0.2f);  // mean
    fill(bn + 3 * c, c, 0.5f, 1.5f);   // var
    const float scale = std::sqrt(4.0f / (c * 6.25f));
    fill(Network::tconv_weight_offset(s), 25 * int64_t(c_out) * c, -scale, scale);
    fill(Network::tconv_bias_offset(s), c_out, -0.1f, 0.1f);
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
  for (int64_t n : {1, 3, 127, 1000}) {
    const auto latents = random_floats(rng, n * kLatentDim, -1, 1);
    std::vector<float> ref(n * kImageValues), got(n * kImageValues,
                                                   std::numeric_limits<float>::quiet_NaN());
    cpu->generate(latents.data(), n, ref.data());
    gpu->generate(latents.data(), n, got.data());
    check_close(got, ref, 1e-5, 0, sizes(n, "CUDA backend vs CPU backend"));
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
