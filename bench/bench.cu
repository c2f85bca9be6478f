// bench.cu: build/facegen-bench, the generator's GPU benchmark (run by `make bench`).
//
// Prints how the tensor cores round a tf32 accumulation (bench/mma_rounding.cuh; --tutorial-only too),
// the device ceilings (cuBLAS SGEMM / TF32 / BF16 TFLOP/s, copy and pinned download GB/s),
// then for each precision: per-layer time and TFLOP/s at batch 8192; images/s at batch 64, 1024 and
// 8192 for the kernels alone (latents and images on the device, graph replays) and end to end in
// memory (host latents -> host images, with the copies; into pinned memory also over 4x the images,
// beside the kernels timed back to back for as long); the cuBLAS baseline beside them; the event
// timeline of a few batches showing downloads overlapped with compute; then the PyTorch DCGAN
// tutorial's generator on both kinds of kernel (bench/tutorial_bench.cuh; --tutorial-only runs
// that section alone). --fp32-tc runs, after the probe, only fp32 on tensor cores beside FFMA, tf32
// and bf16 with their errors against float64 (bench/fp32_tc_bench.cuh; kept out of the full run,
// which bench/run_round.sh times within its deadline); --fp32-tc-layer MODEL:VARIANT:STAGE:BATCH only
// runs one tconv stage three times, for a profiler. Writes network.bin,
// latents.bin, images_<precision>.bin (first 256 images of a batch of 8192) and results.json into
// --out for bench/pytorch_reference.py, which adds PyTorch and the errors vs float64.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/cublas_baseline.cuh"
#include "bench/fp32_tc_bench.cuh"
#include "bench/mma_rounding.cuh"
#include "bench/tutorial_bench.cuh"
#include "generator/gpu_pipeline.hpp"
#include "kernels/generator_gpu.hpp"
#include "common/cuda_check.cuh"
#include "kernels/phase_gemm.cuh"
#include "tests/gpu/reference.hpp"

using namespace facegen;

namespace {

constexpr double kFlopsPerImage = 326.0e6;  // the issue's count: 2 * pixels * 25 taps * c_in * c_out summed

__global__ void fill_random(float* x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    x[i] = (h & 0xffff) / 65536.f - 0.5f;
  }
}
__global__ void to_bf16(const float* x, __nv_bfloat16* y, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    y[i] = __float2bfloat16_rn(x[i]);
}

// Median over `reps` of the event-timed milliseconds of f().
template <typename F>
float time_ms(F f, int reps, cudaStream_t s = nullptr) {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  f();  // warm-up
  CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<float> t;
  for (int r = 0; r < reps; ++r) {
    CUDA_CHECK(cudaEventRecord(a, s));
    f();
    CUDA_CHECK(cudaEventRecord(b, s));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Json {
  std::string s = "{";
  void add(const std::string& k, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    s += (s.size() > 1 ? ",\n \"" : "\n \"") + k + "\": " + buf;
  }
  std::string str() const { return s + "\n}\n"; }
};

void ceilings(Json& js) {
  const int n = 8192;
  float *a, *b, *c;
  CUDA_CHECK(cudaMalloc(&a, sizeof(float) * n * n));
  CUDA_CHECK(cudaMalloc(&b, sizeof(float) * n * n));
  CUDA_CHECK(cudaMalloc(&c, sizeof(float) * n * n));
  fill_random<<<4096, 256>>>(a, size_t(n) * n, 1);
  fill_random<<<4096, 256>>>(b, size_t(n) * n, 2);
  __nv_bfloat16 *ab, *bb;
  CUDA_CHECK(cudaMalloc(&ab, 2 * size_t(n) * n));
  CUDA_CHECK(cudaMalloc(&bb, 2 * size_t(n) * n));
  to_bf16<<<4096, 256>>>(a, ab, size_t(n) * n);
  to_bf16<<<4096, 256>>>(b, bb, size_t(n) * n);
  cublasHandle_t h;
  CUBLAS_CHECK(cublasCreate(&h));
  const float one = 1, zero = 0;
  const double flop = 2.0 * n * n * n;
  float ms = time_ms([&] { CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_32F, n, b, CUDA_R_32F, n, &zero, c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT)); }, 5);
  double sgemm = flop / ms / 1e9;
  ms = time_ms([&] { CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_32F, n, b, CUDA_R_32F, n, &zero, c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT)); }, 5);
  double tf32 = flop / ms / 1e9;
  ms = time_ms([&] { CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, ab, CUDA_R_16BF, n, bb, CUDA_R_16BF, n, &zero, c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)); }, 5);
  double bf16 = flop / ms / 1e9;
  cublasDestroy(h);
  const size_t bytes = sizeof(float) * size_t(n) * n;  // 256 MiB
  ms = time_ms([&] { CUDA_CHECK(cudaMemcpyAsync(c, a, bytes, cudaMemcpyDeviceToDevice)); }, 10);
  double d2d = 2.0 * bytes / ms / 1e6;
  float* host;
  CUDA_CHECK(cudaMallocHost(&host, bytes));
  ms = time_ms([&] { CUDA_CHECK(cudaMemcpyAsync(host, c, bytes, cudaMemcpyDeviceToHost)); }, 5);
  double d2h = bytes / ms / 1e6;
  cudaFreeHost(host);
  for (void* q : {static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(c), static_cast<void*>(ab), static_cast<void*>(bb)}) cudaFree(q);
  std::printf("ceilings (8192^3 GEMMs on random data, cuBLAS): SGEMM %.1f TFLOP/s, TF32 %.1f TFLOP/s, BF16 %.1f TFLOP/s\n",
              sgemm, tf32, bf16);
  std::printf("ceilings: device copy %.0f GB/s (read + write), pinned device-to-host %.1f GB/s\n", d2d, d2h);
  js.add("ceiling_sgemm_tflops", sgemm);
  js.add("ceiling_tf32_tflops", tf32);
  js.add("ceiling_bf16_tflops", bf16);
  js.add("ceiling_d2d_gbs", d2d);
  js.add("ceiling_d2h_gbs", d2h);
}

// tconv3 (stage 2) tile variants at batch 8192 on random activations and weights, timed alone, so one
// round compares the shape the network uses with the ones next to it (128 x 64 with 64 x 32 warp
// tiles, 3 stages: the previous round's; 256 x 64 with 64 x 64 warp tiles in 2 or 3 stages).
template <gpu::Math M, int BM, int BN, int STAGES>
float time_tconv3_variant(const void* in, const void* w, const float* scale, const float* shift, void* out, int n) {
  using Shape = gpu::TileShape<M, BM, BN, STAGES>;
  using Act = typename gpu::MathTypes<M>::Act;
  auto kernel = gpu::tconv_phase_gemm<M, 128, 64, 16, BM, BN, STAGES>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Shape::kSmemBytes));
  const int m_total = n * 16 * 16;
  dim3 grid((m_total + BM - 1) / BM, 64 / BN, 4);
  return time_ms([&] {
    kernel<<<grid, Shape::kThreads, Shape::kSmemBytes>>>(static_cast<const Act*>(in), static_cast<const Act*>(w), scale,
                                                        shift, static_cast<Act*>(out), m_total, 5);
    CUDA_CHECK_LAUNCH();
  }, 5);
}

template <gpu::Math M>
void tconv3_variants(const char* label) {
  const int n = 8192;
  const size_t in_elems = size_t(n) * 16 * 16 * 128, out_elems = size_t(n) * 32 * 32 * 64, w_elems = 25 * 64 * 128;
  float *in_f, *w_f, *scale, *shift;
  void *in, *w, *out;
  CUDA_CHECK(cudaMalloc(&in_f, in_elems * 4));
  CUDA_CHECK(cudaMalloc(&w_f, w_elems * 4));
  CUDA_CHECK(cudaMalloc(&scale, 64 * 4));
  CUDA_CHECK(cudaMalloc(&shift, 64 * 4));
  fill_random<<<4096, 256>>>(in_f, in_elems, 11);
  fill_random<<<64, 256>>>(w_f, w_elems, 12);
  fill_random<<<1, 64>>>(scale, 64, 13);
  fill_random<<<1, 64>>>(shift, 64, 14);
  if constexpr (M == gpu::Math::Bf16) {
    CUDA_CHECK(cudaMalloc(&in, in_elems * 2));
    CUDA_CHECK(cudaMalloc(&w, w_elems * 2));
    to_bf16<<<4096, 256>>>(in_f, static_cast<__nv_bfloat16*>(in), in_elems);
    to_bf16<<<64, 256>>>(w_f, static_cast<__nv_bfloat16*>(w), w_elems);
    CUDA_CHECK(cudaMalloc(&out, out_elems * 2));
  } else {
    in = in_f;
    w = w_f;
    CUDA_CHECK(cudaMalloc(&out, out_elems * 4));
  }
  const double flop = layer_flops_per_image(kShpcSpec, 3) * n;
  const float a = time_tconv3_variant<M, 128, 64, 3>(in, w, scale, shift, out, n);
  const float b = time_tconv3_variant<M, 256, 64, 2>(in, w, scale, shift, out, n);
  const float c = time_tconv3_variant<M, 256, 64, 3>(in, w, scale, shift, out, n);
  std::printf("  tconv3 variants %s (batch %d, ms / TFLOP/s): 128x64 warps 64x32 3 stages %.3f / %.1f; "
              "256x64 warps 64x64 2 stages (used) %.3f / %.1f; 256x64 3 stages %.3f / %.1f\n",
              label, n, a, flop / a / 1e9, b, flop / b / 1e9, c, flop / c / 1e9);
  if constexpr (M == gpu::Math::Bf16) {
    cudaFree(in);
    cudaFree(w);
  }
  for (void* q : {static_cast<void*>(in_f), static_cast<void*>(w_f), static_cast<void*>(scale), static_cast<void*>(shift), out}) cudaFree(q);
}

// The numbered variants of each layer this GPU runs, at batch 8192 and 64 on the same inputs (the
// whole-network cuBLAS baseline, variant 0, is timed per batch below): projection 1 FFMA, 2 mma.sync;
// tconv1-3 1 mma.sync, 2-5 wgmma on sm_90a (2 as shipped, 3 the row tiles, 4 the image kernel, 5 its
// other ring); tconv4 1 direct FFMA, 2 mma.sync GEMM + col2im. Each variant's output is first
// compared with variant 1's (the form the GPU tests have checked against float64 longest), then
// timed. Returns the number of mismatching layers.
int gemm_variants(const std::vector<float>& net, Precision p, const float* z_device, Json& js) {
  DeviceNetwork dn(net.data(), kShpcSpec, p);
  std::vector<GemmKernel> kernels = {GemmKernel::MmaSync};
  try {
    dn.use_gemm_kernel(GemmKernel::Wgmma);
    kernels.push_back(GemmKernel::Wgmma);
  } catch (const std::invalid_argument&) {
  }
  const int n = 8192;
  void* act[4];
  void* out[2];
  for (int s = 0; s < 4; ++s) CUDA_CHECK(cudaMalloc(&act[s], dn.activation_bytes_per_image(s) * n));
  for (void*& o : out) CUDA_CHECK(cudaMalloc(&o, dn.activation_bytes_per_image(1) * n * 4));
  dn.use_gemm_kernel(GemmKernel::MmaSync);
  dn.projection(z_device, n, act[0], nullptr);
  for (int s = 0; s < 3; ++s) dn.tconv(s, act[s], n, act[s + 1], nullptr);
  const double tol = p == Precision::Bf16 ? 3e-2 : 5e-3;  // the GPU tests' per-layer tolerance
  // An activation on the device as floats.
  auto download = [&](const void* a, size_t count) {
    std::vector<float> got(count);
    if (p == Precision::Bf16) {
      std::vector<__nv_bfloat16> b(count);
      CUDA_CHECK(cudaMemcpy(b.data(), a, count * 2, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < count; ++i) got[i] = __bfloat162float(b[i]);
    } else {
      CUDA_CHECK(cudaMemcpy(got.data(), a, count * 4, cudaMemcpyDeviceToHost));
    }
    return got;
  };
  // Prints up to three mismatches of got against ref; returns the worst |difference| (infinity if any
  // value is out of tolerance or not finite).
  auto compare = [&](const std::vector<float>& got, const std::vector<float>& ref, const std::string& what) {
    size_t bad = 0;
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double d = std::fabs(double(got[i]) - ref[i]);
      if (!std::isfinite(got[i]) || !(d <= tol + tol * std::fabs(ref[i])))
        if (bad++ < 3) std::printf("  MISMATCH %s index %zu: %g vs %g\n", what.c_str(), i, got[i], ref[i]);
      worst = std::max(worst, d);
    }
    return bad ? INFINITY : worst;
  };
  int mismatches = 0;
  // Projection: variant 1 FFMA (the yardstick), variant 2 tensor cores (the default).
  {
    const size_t count = dn.activation_bytes_per_image(0) / (p == Precision::Bf16 ? 2 : 4) * n;
    std::vector<float> ref;
    for (int v = 1; v <= 2; ++v) {
      dn.use_projection_mma(v == 2);
      CUDA_CHECK(cudaMemset(out[0], 0xff, dn.activation_bytes_per_image(0) * n));
      dn.projection(z_device, n, out[0], nullptr);
      std::vector<float> got = download(out[0], count);
      const double worst = v == 1 ? 0 : compare(got, ref, std::string("projection ") + precision_name(p) + " variant 2");
      if (v == 1) ref = got;
      mismatches += std::isinf(worst);
      const float ms8192 = time_ms([&] { dn.projection(z_device, n, out[0], nullptr); }, 10);
      const float ms64 = time_ms([&] { dn.projection(z_device, 64, out[0], nullptr); }, 50);
      // Bytes: z read, act0 written (the weights stay in L2).
      const double bytes = double(n) * (kLatentDim * 4 + dn.activation_bytes_per_image(0));
      std::printf("  projection %s variant %d %-12s batch 8192 %7.3f ms %6.0f GB/s | batch 64 %6.3f ms | max |diff| vs variant 1 %.2e%s\n",
                  precision_name(p), v, v == 1 ? "FFMA" : "mma.sync", ms8192, bytes / ms8192 / 1e6, ms64, std::isinf(worst) ? 0 : worst,
                  std::isinf(worst) ? "  MISMATCH" : "");
      js.add(std::string(precision_name(p)) + "_projection_" + (v == 1 ? "ffma" : "mma") + "_ms", ms8192);
    }
    dn.use_projection_mma(true);
  }
  // tconv1-3: variant 1 mma.sync (the yardstick), then on wgmma: 2 as shipped (the image kernel where
  // its grid fills the GPU, else the row tiles), 3 the row tiles, 4 the image kernel, 5 its ring 1.
  struct Form {
    GemmKernel kernel;
    bool image;
    int ring;
    const char* what;
  };
  for (int s = 0; s < 3; ++s) {
    const size_t count = dn.activation_bytes_per_image(s + 1) / (p == Precision::Bf16 ? 2 : 4) * n;
    std::vector<Form> forms = {{GemmKernel::MmaSync, false, 0, "mma.sync"}};
    if (kernels.size() > 1) {
      forms.push_back({GemmKernel::Wgmma, false, -1, "wgmma as shipped"});
      forms.push_back({GemmKernel::Wgmma, false, 0, "wgmma rows"});
      forms.push_back({GemmKernel::Wgmma, true, 0, "wgmma image"});
      forms.push_back({GemmKernel::Wgmma, true, 1, "wgmma image ring 1"});
    }
    std::vector<float> ref;
    for (size_t k = 0; k < forms.size(); ++k) {
      dn.use_gemm_kernel(forms[k].kernel);
      if (forms[k].ring < 0) dn.use_wgmma_image_by_grid();
      else dn.use_wgmma_image(s, forms[k].image, forms[k].ring);
      CUDA_CHECK(cudaMemset(out[k % 2], 0xff, dn.activation_bytes_per_image(s + 1) * n));
      dn.tconv(s, act[s], n, out[k % 2], nullptr);
      std::vector<float> got = download(out[k % 2], count);
      const double worst = k == 0 ? 0 : compare(got, ref, "tconv" + std::to_string(s + 1) + " " + precision_name(p) + " " + forms[k].what);
      if (k == 0) ref = got;
      mismatches += std::isinf(worst);
      const float ms8192 = time_ms([&] { dn.tconv(s, act[s], n, out[k % 2], nullptr); }, 10);
      const float ms64 = time_ms([&] { dn.tconv(s, act[s], 64, out[k % 2], nullptr); }, 50);
      const double flop = layer_flops_per_image(kShpcSpec, s + 1);
      std::printf("  tconv%d %s variant %zu %-18s batch 8192 %7.3f ms %6.1f TFLOP/s | batch 64 %6.3f ms %6.1f TFLOP/s | "
                  "max |diff| vs mma.sync %.2e%s\n", s + 1, precision_name(p), k + 1, forms[k].what, ms8192,
                  flop * n / ms8192 / 1e9, ms64, flop * 64 / ms64 / 1e9, std::isinf(worst) ? 0 : worst,
                  std::isinf(worst) ? "  MISMATCH" : "");
      std::string key = forms[k].what;
      std::replace(key.begin(), key.end(), ' ', '_');
      js.add(std::string(precision_name(p)) + "_tconv" + std::to_string(s + 1) + "_" + key + "_ms", ms8192);
    }
    dn.use_wgmma_image_by_grid();
  }
  dn.use_output_mma(true);
  if (dn.output_mma()) {
    // tconv4 + tanh (tf32, bf16): variant 1 the direct FFMA kernel, variant 2 the tensor-core GEMM +
    // col2im, on the act3 just made; variant 2 is compared with variant 1 first.
    float* images[2];
    for (float*& im : images) CUDA_CHECK(cudaMalloc(&im, size_t(n) * kImageValues * 4));
    std::vector<float> got[2];
    float ms[2];
    for (int v = 0; v < 2; ++v) {
      dn.use_output_mma(v == 1);
      CUDA_CHECK(cudaMemset(images[v], 0xff, size_t(n) * kImageValues * 4));
      dn.output_layer(act[3], n, images[v], nullptr);
      got[v].resize(size_t(n) * kImageValues);
      CUDA_CHECK(cudaMemcpy(got[v].data(), images[v], got[v].size() * 4, cudaMemcpyDeviceToHost));
      ms[v] = time_ms([&] { dn.output_layer(act[3], n, images[v], nullptr); }, 10);
    }
    // Agreement: within 2e-5; bf16's tensor-core kernel has 16-bit weights (two bf16 terms), 1e-4
    // (measured 1.5e-5 in v8), still 300x below bf16 arithmetic's own error.
    const double limit = p == Precision::Bf16 ? 1e-4 : 2e-5;
    double worst = 0;
    size_t bad = 0;
    for (size_t i = 0; i < got[0].size(); ++i) {
      const double d = std::fabs(double(got[0][i]) - got[1][i]);
      worst = std::max(worst, d);
      bad += !std::isfinite(got[1][i]) || !(d <= limit);
    }
    mismatches += bad > 0;
    // Bytes: act3 read once, the images written once.
    const double bytes = double(n) * (dn.activation_bytes_per_image(3) + kImageValues * 4);
    std::printf("  tconv4 %s variant 1 direct FFMA     batch 8192 %7.3f ms %6.0f GB/s\n", precision_name(p), ms[0], bytes / ms[0] / 1e6);
    std::printf("  tconv4 %s variant 2 mma GEMM+col2im batch 8192 %7.3f ms %6.0f GB/s | max |diff| vs variant 1 %.2e%s\n",
                precision_name(p), ms[1], bytes / ms[1] / 1e6, worst, bad ? "  MISMATCH" : "");
    js.add(std::string(precision_name(p)) + "_tconv4_direct_ms", ms[0]);
    js.add(std::string(precision_name(p)) + "_tconv4_mma_ms", ms[1]);
    for (float* q : images) cudaFree(q);
  }
  for (void* a : act) cudaFree(a);
  for (void* o : out) cudaFree(o);
  return mismatches;
}

// Host copy out of pinned memory into pre-touched pageable memory (the pipeline's last step), by
// 1, 8 and 16 threads: the ceiling the end-to-end rate meets once the GPU no longer waits.
void host_copy_ceiling(Json& js) {
  const size_t bytes = size_t(8192) * kImageValues * 4;  // one batch of 8192 images, 400 MB
  float* pinned;
  CUDA_CHECK(cudaMallocHost(&pinned, bytes));
  std::memset(pinned, 1, bytes);
  std::vector<char> dst(bytes, 0);
  std::printf("ceilings: host copy pinned -> pageable, 400 MB:");
  for (int threads : {1, 8, 16}) {
    double best = 1e30;
    for (int r = 0; r < 3; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      std::vector<std::thread> th;
      const size_t step = (bytes + threads - 1) / threads;
      for (int t = 0; t < threads; ++t)
        th.emplace_back([&, t] {
          size_t b0 = std::min(bytes, t * step), b1 = std::min(bytes, b0 + step);
          std::memcpy(dst.data() + b0, reinterpret_cast<const char*>(pinned) + b0, b1 - b0);
        });
      for (auto& x : th) x.join();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf(" %d thread%s %.1f GB/s (%.1f ms);", threads, threads > 1 ? "s" : "", bytes / best / 1e9, best * 1e3);
    js.add("ceiling_host_copy_gbs_t" + std::to_string(threads), bytes / best / 1e9);
  }
  std::printf("\n");
  cudaFreeHost(pinned);
}

void write_file(const std::string& path, const void* data, size_t bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), bytes);
  if (!f) throw std::runtime_error("cannot write " + path);
}

}  // namespace

int main(int argc, char** argv) {
  std::string out = "build/bench-run";
  bool quick = false, tutorial_only = false, fp32_tc_only = false;
  std::string fp32_tc_layer;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--tutorial-only")) tutorial_only = true;  // the tutorial network's section alone
    else if (!std::strcmp(argv[i], "--fp32-tc")) fp32_tc_only = true;         // fp32 on tensor cores' section alone
    else if (!std::strcmp(argv[i], "--fp32-tc-layer") && i + 1 < argc) fp32_tc_layer = argv[++i];  // one layer, for a profiler
  }
  try {
    if (!fp32_tc_layer.empty()) return fp32_tc_profile_layer(fp32_tc_layer, reference::random_network(1));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s, %d SMs, %.0f MB L2\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize / 1e6);
    Json js;
    bench::probe_mma_rounding([&](const std::string& key, double v) { js.add(key, v); });
    const auto net = reference::random_network(1);
    const int kMaxN = 8192;
    constexpr int64_t kMaxRunImages = int64_t{kMaxN} * 8;  // the longest end-to-end run into host memory
    constexpr int64_t kLongPinnedRun = 4;                  // the pinned runs are 4x longer (no host buffer)
    std::vector<float> z(size_t(kMaxRunImages * kLongPinnedRun) * kLatentDim);
    std::mt19937_64 rng(2);
    std::normal_distribution<float> nd;
    for (auto& v : z) v = nd(rng);
    write_file(out + "/network.bin", net.data(), net.size() * 4);
    write_file(out + "/latents.bin", z.data(), size_t(kMaxN) * kLatentDim * 4);
    auto tutorial = [&] {
      return bench_tutorial_network(
          out, z, net, quick, [](const auto& f, int reps, cudaStream_t s) { return time_ms(f, reps, s); },
          [&](const std::string& key, double v) { js.add(key, v); });
    };
    auto fp32_tc = [&] {
      return bench_fp32_tensor_cores(
          out, z, net, quick, [](const auto& f, int reps, cudaStream_t s) { return time_ms(f, reps, s); },
          [&](const std::string& key, double v) { js.add(key, v); });
    };
    if (tutorial_only || fp32_tc_only) {
      const int failed = tutorial_only ? tutorial() : fp32_tc();
      std::ofstream(out + "/results.json") << js.str();
      return failed ? 2 : 0;
    }

    ceilings(js);
    host_copy_ceiling(js);
    tconv3_variants<gpu::Math::Tf32>("tf32");
    tconv3_variants<gpu::Math::Bf16>("bf16");

    std::vector<float> host_images(size_t(kMaxRunImages) * kImageValues);
    std::memset(host_images.data(), 0, host_images.size() * 4);  // touch the pages before timing

    const int batches[] = {64, 1024, 8192};
    const char* layer_names[] = {"projection+bn+relu", "tconv1 phase GEMM", "tconv2 phase GEMM", "tconv3 phase GEMM", "tconv4+tanh"};
    std::string table;
    int mismatches = 0;
    for (Precision p : {Precision::Fp32, Precision::Tf32, Precision::Bf16}) {
      std::printf("\n== %s%s ==\n", precision_name(p),
                  p == Precision::Fp32 ? " (on tensor cores where the GPU has them; FACEGEN_GPU_FP32=ffma: FFMA)" : "");
      if (p != Precision::Fp32) {
        float* zd;
        CUDA_CHECK(cudaMalloc(&zd, size_t(kMaxN) * kLatentDim * 4));
        CUDA_CHECK(cudaMemcpy(zd, z.data(), size_t(kMaxN) * kLatentDim * 4, cudaMemcpyHostToDevice));
        mismatches += gemm_variants(net, p, zd, js);
        cudaFree(zd);
      }
      // Per layer at batch 8192, then at 64 (where the grids are small and the tile shapes change).
      for (int LB : {kMaxN, 64}) {
        GpuPipeline pipe(net.data(), p, kMaxN, 0);
        const DeviceNetwork& dn = pipe.network();
        void* act[4];
        for (int s = 0; s < 4; ++s) CUDA_CHECK(cudaMalloc(&act[s], dn.activation_bytes_per_image(s) * kMaxN));
        CUDA_CHECK(cudaMemcpy(pipe.device_latents(0), z.data(), size_t(kMaxN) * kLatentDim * 4, cudaMemcpyHostToDevice));
        dn.forward(pipe.device_latents(0), LB, act, pipe.device_images(0), nullptr);
        float total = 0;
        for (int l = 0; l < 5; ++l) {
          float ms = time_ms([&] {
            if (l == 0) dn.projection(pipe.device_latents(0), LB, act[0], nullptr);
            else if (l < 4) dn.tconv(l - 1, act[l - 1], LB, act[l], nullptr);
            else dn.output_layer(act[3], LB, pipe.device_images(0), nullptr);
          }, LB == kMaxN ? (quick ? 3 : 10) : 50);
          total += ms;
          double tf = layer_flops_per_image(kShpcSpec, l) * LB / ms / 1e9;
          std::printf("  layer %-20s %8.3f ms  %6.1f TFLOP/s  (batch %d)\n", layer_names[l], ms, tf, LB);
          js.add(std::string(precision_name(p)) + "_layer" + std::to_string(l) + (LB == kMaxN ? "" : "_b" + std::to_string(LB)) + "_ms", ms);
        }
        std::printf("  layers total          %8.3f ms  %6.1f TFLOP/s  (%.0f images/s, batch %d)\n", total,
                    kFlopsPerImage * LB / total / 1e9, LB / (total / 1e3), LB);
        if (LB != kMaxN) {
          for (void* a : act) cudaFree(a);
          continue;
        }
        // First 256 images of this batch for the error check against float64, as a run hands them over
        // (through generate: bf16's rounded to float16 on the way; the same bytes as in a batch of 8192).
        std::vector<float> img(size_t(256) * kImageValues);
        pipe.generate(z.data(), 256, img.data());
        write_file(out + "/images_" + precision_name(p) + ".bin", img.data(), img.size() * 4);
        for (void* a : act) cudaFree(a);
      }
      for (int B : batches) {
        GpuPipeline pipe(net.data(), p, B, 0);
        CUDA_CHECK(cudaMemcpy(pipe.device_latents(0), z.data(), size_t(B) * kLatentDim * 4, cudaMemcpyHostToDevice));
        const int inner = std::max(1, 8192 / B);  // ~8192 images per timed repetition
        float ms = time_ms([&] { for (int r = 0; r < inner; ++r) pipe.run_slot(0, B); }, quick ? 3 : 7, pipe.compute_stream());
        double kernels = double(B) * inner / (ms / 1e3);
        // End to end: host latents -> host images (pageable, pre-touched), 8 batches per call.
        const int64_t n = int64_t{B} * 8 * (B < 1024 ? 8 : 1);
        pipe.generate(z.data(), std::min<int64_t>(n, B * 2), host_images.data());  // warm-up
        pipe.record_timeline(B == 8192 || B == 64);
        auto t0 = std::chrono::steady_clock::now();
        pipe.generate(z.data(), n, host_images.data());
        double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        double e2e = n / sec;
        // End to end without the copy out of pinned memory: each chunk of images is handed over where
        // it landed (the way a writer reading pinned memory would take it; bf16's as float16); the
        // first and last value of every image are read, so every chunk is seen by the host. Timed for
        // the same n images, and for 4n: a run pays once for filling and draining the pipeline (the
        // first batch's upload and arithmetic, the last one's download), which 4n amortises further.
        double seen = 0;
        auto consume = [&](int64_t, const PinnedImages& images) {
          for (int i = 0; i < images.count; ++i)
            seen += images.value(size_t(i) * kImageValues) + images.value(size_t(i + 1) * kImageValues - 1);
        };
        pipe.record_timeline(false);  // the timeline printed below is the run with the host copy
        pipe.generate_each(z.data(), std::min<int64_t>(n, B * 2), consume);  // warm-up
        auto pinned_rate = [&](int64_t images) {
          const auto start = std::chrono::steady_clock::now();
          pipe.generate_each(z.data(), images, consume);
          return images / std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        };
        const double e2e_pinned = pinned_rate(n), e2e_pinned_long = pinned_rate(n * kLongPinnedRun);
        if (!std::isfinite(seen)) throw std::runtime_error("non-finite images in the pinned end-to-end run");
        // The kernels again, as long as the 4n run and back to back (the GPU's clock under sustained
        // load, which the short timing above may not meet): the yardstick for that run.
        const int64_t long_batches = n * kLongPinnedRun / B;
        const float long_ms = time_ms([&] { for (int64_t r = 0; r < long_batches; ++r) pipe.run_slot(0, B); }, 1,
                                      pipe.compute_stream());
        const double kernels_long = double(B) * long_batches / (long_ms / 1e3);
        // cuBLAS baseline, kernels alone, on the same latents; then both once more for the comparison.
        CublasGenerator cb(net, p, B);
        for (int k = 0; k < 2; ++k)
          CUDA_CHECK(cudaMemcpy(pipe.device_latents(k), z.data(), size_t(B) * kLatentDim * 4, cudaMemcpyHostToDevice));
        float cms = time_ms([&] { for (int r = 0; r < inner; ++r) cb.forward(pipe.device_latents(1), B, pipe.device_images(1), pipe.compute_stream()); }, quick ? 2 : 5, pipe.compute_stream());
        double cublas = double(B) * inner / (cms / 1e3);
        pipe.run_slot(0, B);
        CUDA_CHECK(cudaStreamSynchronize(pipe.compute_stream()));
        std::vector<float> a(size_t(B) * kImageValues), b(a.size());
        CUDA_CHECK(cudaMemcpy(a.data(), pipe.device_images(0), a.size() * 4, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(b.data(), pipe.device_images(1), b.size() * 4, cudaMemcpyDeviceToHost));
        double diff = 0;
        for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, double(std::fabs(a[i] - b[i])));
        std::printf("  batch %5d: kernels %9.0f images/s (%5.1f TFLOP/s), end to end %9.0f images/s (%lld images; "
                    "%9.0f images/s to pinned memory, no host copy; %9.0f for %lld images, %s, against kernels %9.0f "
                    "over as many), cuBLAS baseline %9.0f images/s, max |ours - cuBLAS| %.2e\n",
                    B, kernels, kernels * kFlopsPerImage / 1e12, e2e, static_cast<long long>(n), e2e_pinned,
                    e2e_pinned_long, static_cast<long long>(n * kLongPinnedRun),
                    pipe.transfer() == ImageTransfer::Float16 ? "float16 over PCIe" : "float32 over PCIe", kernels_long,
                    cublas, diff);
        const std::string key = std::string(precision_name(p)) + "_b" + std::to_string(B);
        js.add(key + "_kernels", kernels);
        js.add(key + "_e2e", e2e);
        js.add(key + "_e2e_pinned", e2e_pinned);
        js.add(key + "_e2e_pinned_long", e2e_pinned_long);
        js.add(key + "_kernels_long", kernels_long);
        js.add(key + "_cublas", cublas);
        if (!pipe.timeline().empty()) {
          std::printf("  timeline, batch %d (ms from start; upload | compute | download):\n", B);
          const auto& tl = pipe.timeline();
          for (size_t i = 0; i < std::min<size_t>(tl.size(), 4); ++i)
            std::printf("    batch %zu: up %7.3f-%7.3f | compute %7.3f-%7.3f | down %7.3f-%7.3f%s\n", i, tl[i].upload_begin,
                        tl[i].upload_end, tl[i].compute_begin, tl[i].compute_end, tl[i].download_begin, tl[i].download_end,
                        i + 1 < tl.size() && tl[i].download_end > tl[i + 1].compute_begin ? "  (download overlaps next compute)" : "");
          pipe.record_timeline(false);
        }
      }
    }
    const int tutorial_failed = tutorial();
    std::ofstream(out + "/results.json") << js.str();
    std::printf("\nwrote %s/results.json; bench/pytorch_reference.py adds PyTorch and the float64 errors\n", out.c_str());
    std::printf("GEMM variants: %s\n", mismatches ? "MISMATCH (see above)" : "all agree with mma.sync within tolerance");
    if (mismatches || tutorial_failed) return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "facegen-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
