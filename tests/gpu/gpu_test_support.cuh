// gpu_test_support.cuh: what the GPU test files share: the run's seed, batch sizes, the tolerance
// rule |got - ref| <= atol + rtol |ref| and the whole pipeline's tolerances, poisoned device buffers,
// activations exactly representable in each precision's storage type, and float64 reference images
// computed on all cores.
#pragma once

#include <doctest/doctest.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/cuda_check.cuh"
#include "common/precision.hpp"
#include "kernels/generator_gpu.hpp"
#include "kernels/weight_folding.hpp"
#include "tests/gpu/layer_errors.hpp"
#include "tests/gpu/reference.hpp"

namespace facegen {

// Fresh each run (printed once; FACEGEN_TEST_SEED repeats a run), the same in every test file.
inline uint64_t test_seed() {
  static const uint64_t seed = [] {
    const char* e = std::getenv("FACEGEN_TEST_SEED");
    uint64_t s = e ? std::strtoull(e, nullptr, 10)
                   : static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) % 1000000007u;
    std::printf("GPU tests: seed %llu (FACEGEN_TEST_SEED=%llu repeats this run)\n",
                static_cast<unsigned long long>(s), static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

inline std::vector<int> batch_sizes() {
  const char* e = std::getenv("FACEGEN_GPU_TEST_MAX_BATCH");
  const int cap = e ? std::atoi(e) : 1 << 30;
  std::vector<int> out;
  for (int n : {1, 3, 127, 1000, 8192})
    if (n <= cap) out.push_back(n);
  return out;
}

inline std::vector<int> sampled_images(int n) {
  std::vector<int> s = {0};
  for (int i : {1, n / 2, n - 1})
    if (i > s.back() && i < n) s.push_back(i);
  return s;
}

inline std::string name(Precision p) { return precision_name(p); }

struct Tolerance { double atol, rtol; };
inline Tolerance layer_tolerance(Precision p) {
  return p == Precision::Fp32 ? Tolerance{1e-4, 1e-4} : p == Precision::Tf32 ? Tolerance{5e-3, 5e-3} : Tolerance{3e-2, 3e-2};
}

inline float round_tf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x1000u) & 0xffffe000u;
  std::memcpy(&x, &u, 4);
  return x;
}

// Device buffer of n floats or bf16 values, with poison.
struct DeviceBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t b) : bytes(b) { CUDA_CHECK(cudaMalloc(&p, b)); }
  ~DeviceBuffer() { cudaFree(p); }
  void poison() { CUDA_CHECK(cudaMemset(p, 0xff, bytes)); }  // NaN in float32 and bfloat16
};

// Activation values as the GPU stores them for precision p: float32 (tf32-rounded) or bfloat16.
struct Activations {
  std::vector<float> values;  // exactly representable in the GPU's storage type
  std::vector<unsigned char> bytes;
};
inline Activations make_activations(size_t count, Precision p, std::mt19937_64& rng) {
  Activations a;
  a.values.resize(count);
  std::uniform_real_distribution<float> u(0.f, 1.5f);
  for (auto& v : a.values) {
    float x = u(rng);
    if (p == Precision::Tf32) x = round_tf32(x);
    if (p == Precision::Bf16) x = __bfloat162float(__float2bfloat16_rn(x));
    v = x;
  }
  if (p == Precision::Bf16) {
    a.bytes.resize(count * 2);
    for (size_t i = 0; i < count; ++i) {
      __nv_bfloat16 b = __float2bfloat16_rn(a.values[i]);
      std::memcpy(&a.bytes[2 * i], &b, 2);
    }
  } else {
    a.bytes.resize(count * 4);
    std::memcpy(a.bytes.data(), a.values.data(), count * 4);
  }
  return a;
}

inline std::vector<float> to_floats(const std::vector<unsigned char>& bytes, Precision p) {
  if (p != Precision::Bf16) {
    std::vector<float> f(bytes.size() / 4);
    std::memcpy(f.data(), bytes.data(), bytes.size());
    return f;
  }
  std::vector<float> f(bytes.size() / 2);
  for (size_t i = 0; i < f.size(); ++i) {
    __nv_bfloat16 b;
    std::memcpy(&b, &bytes[2 * i], 2);
    f[i] = __bfloat162float(b);
  }
  return f;
}

// Compares got (count_per_image values for each of n images) with ref at the sampled images, and
// checks every value is finite (no poison left). Returns the worst absolute error.
inline double check(const std::vector<float>& got, int n, size_t per_image,
             const std::map<int, std::vector<double>>& ref, Tolerance tol, const std::string& what) {
  size_t not_finite = 0;
  for (float v : got) not_finite += !std::isfinite(v);
  CHECK_MESSAGE(not_finite == 0, what << ": " << not_finite << " values not written or not finite");
  double worst = 0;
  int shown = 0;
  for (const auto& [img, r] : ref) {
    for (size_t i = 0; i < per_image; ++i) {
      double g = got[img * per_image + i], d = std::fabs(g - r[i]);
      worst = std::max(worst, d);
      if (!(d <= tol.atol + tol.rtol * std::fabs(r[i])) && shown < 5) {
        ++shown;
        FAIL_CHECK(what << ": image " << img << " index " << i << ": got " << g << ", reference " << r[i]);
      }
    }
  }
  return worst;
}

// Runs f(image) for each sampled image on all cores.
template <typename F>
std::map<int, std::vector<double>> reference_images(const std::vector<int>& imgs, F f) {
  std::map<int, std::vector<double>> out;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int img : imgs)
    threads.emplace_back([&, img] {
      auto r = f(img);
      std::lock_guard<std::mutex> lock(mu);
      out[img] = std::move(r);
    });
  for (auto& t : threads) t.join();
  return out;
}

inline const Precision kPrecisions[] = {Precision::Fp32, Precision::Tf32, Precision::Bf16};

// The arithmetics the layer and pipeline cases run: each precision, and fp32 in both its kernels
// (kernels/generator_gpu.hpp, Fp32Kernel): on tensor cores (the default) and by FFMA, chosen by
// FACEGEN_GPU_FP32 while the network is made (Fp32KernelScope).
struct Arithmetic {
  Precision precision;
  const char* fp32_kernel;  // FACEGEN_GPU_FP32: tc, ffma, or auto for tf32 and bf16
  const char* name;
};
inline const Arithmetic kArithmetics[] = {{Precision::Fp32, "tc", "fp32 tc"},
                                          {Precision::Fp32, "ffma", "fp32 ffma"},
                                          {Precision::Tf32, "auto", "tf32"},
                                          {Precision::Bf16, "auto", "bf16"}};

// FACEGEN_GPU_FP32 set for the networks made in one scope; what was set before comes back after it.
class Fp32KernelScope {
 public:
  explicit Fp32KernelScope(const char* kernel) {
    const char* before = std::getenv("FACEGEN_GPU_FP32");
    had_ = before != nullptr;
    if (had_) saved_ = before;
    setenv("FACEGEN_GPU_FP32", kernel, 1);
  }
  ~Fp32KernelScope() {
    if (had_) setenv("FACEGEN_GPU_FP32", saved_.c_str(), 1);
    else unsetenv("FACEGEN_GPU_FP32");
  }
  Fp32KernelScope(const Fp32KernelScope&) = delete;
  Fp32KernelScope& operator=(const Fp32KernelScope&) = delete;

 private:
  bool had_ = false;
  std::string saved_;
};

// The whole pipeline's usual tolerance against float64 (absolute).
inline Tolerance image_tolerance(Precision p) {
  return p == Precision::Fp32 ? Tolerance{1e-5, 0} : p == Precision::Tf32 ? Tolerance{5e-3, 0} : Tolerance{5e-2, 0};
}

// What the kernels round in tf32 and bf16: the activations entering each transposed convolution,
// stored as tf32-rounded floats or as bf16, and the weights of tconv1-3 (the last layer's weight
// terms and the projection keep float32's accuracy or nearly).
inline double stored_tf32(double v) { return round_to_tf32(static_cast<float>(v)); }
inline double stored_bf16(double v) { return __bfloat162float(__float2bfloat16_rn(static_cast<float>(v))); }

// A network's images depend on its precision's rounding more or less strongly: a narrow one (nz 1,
// g 16) sums few products, so its errors average out less. The pipeline's tolerance is the
// precision's usual one, or twice the error of the float64 forward with that rounding emulated
// (reference::forward with the stored activations and the weights rounded), whichever is larger.
inline double emulated_rounding_error(const std::vector<float>& net, const ModelSpec& spec, Precision p, const std::vector<int>& imgs,
                               const std::vector<float>& z, const std::map<int, std::vector<double>>& exact) {
  if (p == Precision::Fp32) return 0;
  const reference::StoredRounding round = p == Precision::Tf32 ? stored_tf32 : stored_bf16;
  std::vector<float> rounded = net;
  const reference::Offsets o(spec);
  for (int s = 0; s < 3; ++s)
    for (int64_t i = o.tconv_weight[s]; i < o.tconv_bias[s]; ++i) rounded[i] = static_cast<float>(round(rounded[i]));
  const auto emulated = reference_images(imgs, [&](int img) {
    return reference::forward(rounded, &z[size_t(img) * spec.latent_dim], spec, round);
  });
  double worst = 0;
  for (const auto& [img, values] : emulated)
    for (size_t i = 0; i < values.size(); ++i) worst = std::max(worst, std::fabs(values[i] - exact.at(img)[i]));
  return worst;
}

// fp32 on tensor cores against fp32 on FFMA, all against float64 on the same n images of net
// (tests/gpu/layer_errors.hpp), layer by layer on the float64 pass's own inputs and for the whole
// network: every value written and finite; each layer within 1e-4 (the last, after tanh, and the
// images within image_tol); and the tensor cores' worst error at most twice FFMA's and their mean at
// most 1.5 times. (bench/split_products.cpp's emulation put both at or below FFMA's on the faces model;
// twice leaves room for the worst of a few images.) The tensor cores in each form the device runs:
// the network's own choice (wgmma on an H100 or H200 with sm_90a code, else mma.sync) and, where that
// is wgmma, mma.sync too. Prints every error, and whether the two tensor-core forms gave the same bits.
inline void check_fp32_tensor_cores_as_exact(const std::vector<float>& net, const ModelSpec& spec, const std::vector<float>& z,
                                             int n, double image_tol, const std::string& what) {
  const LayerReference ref = make_layer_reference(net, spec, z.data(), n);
  NetworkErrors ffma;
  {
    const Fp32KernelScope scope("ffma");
    const DeviceNetwork dn(net.data(), spec, Precision::Fp32);
    REQUIRE(dn.fp32_kernel() == Fp32Kernel::Ffma);
    ffma = measure_layer_errors(dn, ref);
  }
  const Fp32KernelScope scope("tc");
  DeviceNetwork dn(net.data(), spec, Precision::Fp32);
  REQUIRE(dn.fp32_kernel() == Fp32Kernel::TensorCores);
  std::vector<GemmKernel> forms = {dn.gemm_kernel()};
  if (forms[0] == GemmKernel::Wgmma) forms.push_back(GemmKernel::MmaSync);
  std::vector<float> images[2];
  const char* layers[kGpuLayers + 1] = {"projection", "tconv1", "tconv2", "tconv3", "tconv4+tanh", "network"};
  for (size_t f = 0; f < forms.size(); ++f) {
    dn.use_gemm_kernel(forms[f]);
    const NetworkErrors tc = measure_layer_errors(dn, ref, &images[f]);
    for (int l = 0; l <= kGpuLayers; ++l) {
      const ErrorStats& a = l < kGpuLayers ? ffma.layer[l] : ffma.network;
      const ErrorStats& b = l < kGpuLayers ? tc.layer[l] : tc.network;
      const double limit = l >= kGpuLayers - 1 ? image_tol : 1e-4;
      const std::string at = what + " " + layers[l] + " (tensor cores on " + gemm_kernel_name(forms[f]) + ")";
      MESSAGE(at << ": |error| vs float64 over " << n << " images, worst / mean: tensor cores " << b.worst << " / "
                 << b.mean() << ", FFMA " << a.worst << " / " << a.mean());
      CHECK_MESSAGE(b.not_finite + a.not_finite == 0, at << ": values not written or not finite: tensor cores "
                                                         << b.not_finite << ", FFMA " << a.not_finite);
      CHECK_MESSAGE(b.worst <= limit, at << ": tensor cores' worst error " << b.worst << " over " << limit);
      CHECK_MESSAGE(a.worst <= limit, at << ": FFMA's worst error " << a.worst << " over " << limit);
      CHECK_MESSAGE(b.worst <= 2 * a.worst, at << ": tensor cores' worst error " << b.worst << " over twice FFMA's " << a.worst);
      CHECK_MESSAGE(b.mean() <= 1.5 * a.mean(), at << ": tensor cores' mean error " << b.mean() << " over 1.5 times FFMA's " << a.mean());
    }
  }
  if (forms.size() == 2)
    MESSAGE(what << ": the images of fp32 on wgmma and on mma.sync are "
                 << (images[0].size() == images[1].size() &&
                             std::memcmp(images[0].data(), images[1].data(), images[0].size() * 4) == 0
                         ? "the same bits"
                         : "not the same bits (each within the bounds above)"));
}

}  // namespace facegen
