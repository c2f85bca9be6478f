// fp32_tc_bench.cuh: float32 on tensor cores (3xTF32: kernels/cuda_helpers.cuh on mma.sync,
// kernels/phase_gemm_wgmma_tf32x3.cuh on wgmma) beside float32 FFMA, tf32 and bf16, for
// build/facegen-bench (`facegen-bench --fp32-tc` runs this section alone).
//
// The fp32 variants: 1 FFMA (FACEGEN_GPU_FP32=ffma), 2 tensor cores on mma.sync (tc with
// FACEGEN_GPU_GEMM=mma), 3 tensor cores on wgmma (tc; the default on an H100 or H200), and, per layer
// and in the errors only, variant 3 in its other schedules: 4 one column slice a warpgroup (the same
// bits), 5 an FADD every two k steps (other bits, emulated as "wgmma R2"). For the
// default model (models/facegen-faces.safetensors, 4x4 kernels) and the SHPC network (the benchmark's
// random network.bin, 5x5 kernels, biases):
//   1. validates each arithmetic first: 8 images against float64 within the GPU tests' image
//      tolerances, and a batch of 64's bytes equal to the same images in a batch of 8192;
//   2. times the kernels alone (latents and images on the device, graph replays) at batch 64, 512
//      and 8192 and prints them side by side: fp32 variants 1-3, tf32, bf16;
//   3. per layer at batch 8192, 512 and 64: variants 1-5 on the same activations, each compared with
//      variant 1 (the GPU tests' fp32 layer tolerance), 4's bytes with 3's (they must be equal), 3's
//      with 2's (printed: the same sums, expected the same bits), and at 512 and 64 variant 3 in both
//      tile shapes.
// Then the errors against float64 (bench/fp32_tc_accuracy.cuh). `facegen-bench --fp32-tc-layer
// MODEL:VARIANT:STAGE:BATCH` runs one tconv stage three times and nothing else, for a profiler
// (bench/fp32_wgmma_round.sh).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/fp32_tc_accuracy.cuh"
#include "common/cuda_check.cuh"
#include "common/model_spec.hpp"
#include "generator/gpu_pipeline.hpp"
#include "generator/network.hpp"
#include "kernels/generator_gpu.hpp"
#include "kernels/weight_folding.hpp"
#include "tests/gpu/layer_errors.hpp"
#include "tests/gpu/reference.hpp"

namespace facegen {

struct BenchModel {
  std::string name, key;
  ModelSpec spec;
  std::vector<float> floats;
};

constexpr int kValidatedImages = 8;

// Step 1 for one model and arithmetic; ref: the float64 images of the first kValidatedImages latents.
// Returns the number of failed checks.
inline int fp32_tc_validate(const BenchModel& m, const BenchArithmetic& a, const std::vector<float>& z,
                            const std::vector<std::vector<double>>& ref) {
  constexpr int kChecked = kValidatedImages, kSmall = 64, kLarge = 8192;
  const size_t per_image = m.spec.image_values();
  std::vector<float> img[2];
  int i = 0;
  for (int batch : {kSmall, kLarge}) {
    const ScopedGpuSettings use(a.fp32_kernel, a.gemm);
    GpuPipeline pipe(m.floats.data(), m.spec, a.precision, batch, 0);
    CUDA_CHECK(cudaMemcpy(pipe.device_latents(0), z.data(), size_t(batch) * m.spec.latent_dim * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(pipe.device_images(0), 0xff, size_t(batch) * per_image * 4));
    pipe.run_slot(0, batch);
    CUDA_CHECK(cudaStreamSynchronize(pipe.compute_stream()));
    img[i].resize(size_t(kSmall) * per_image);
    CUDA_CHECK(cudaMemcpy(img[i].data(), pipe.device_images(0), img[i].size() * 4, cudaMemcpyDeviceToHost));
    ++i;
  }
  double worst = 0;
  size_t bad = 0;
  for (int k = 0; k < kChecked; ++k) {
    for (size_t v = 0; v < per_image; ++v) {
      const double d = std::fabs(img[0][k * per_image + v] - ref[k][v]);
      worst = std::max(worst, d);
      bad += !(d <= a.image_tol);
    }
  }
  for (float v : img[0]) bad += !std::isfinite(v);
  const bool same = std::memcmp(img[0].data(), img[1].data(), img[0].size() * 4) == 0;
  std::printf("  %-13s %-30s first %d images vs float64: max |error| %.2e (limit %g)%s; batch 64 %s batch 8192's bytes\n",
              m.name.c_str(), a.name, kChecked, worst, a.image_tol, bad ? "  MISMATCH" : "", same ? "==" : "!= (MISMATCH)");
  return (bad > 0) + !same;
}

// The five fp32 variants of step 3 as networks: kBenchArithmetics' three, and 4 and 5 on 3's network
// in its schedules 1 (the same bits) and 2 (an FADD every two k steps).
struct Fp32Variants {
  static constexpr int kCount = kFp32Variants + 2;
  std::unique_ptr<DeviceNetwork> dn[kFp32Variants];
  std::unique_ptr<DeviceNetwork> shape[2];  // variant 3 in the Small and the Large tiles (FACEGEN_GPU_TILES)

  explicit Fp32Variants(const BenchModel& m) {
    for (int v = 0; v < kFp32Variants; ++v) {
      const ScopedGpuSettings use(kBenchArithmetics[v].fp32_kernel, kBenchArithmetics[v].gemm);
      dn[v] = std::make_unique<DeviceNetwork>(m.floats.data(), m.spec, Precision::Fp32);
    }
    const BenchArithmetic& v3 = kBenchArithmetics[kFp32Variants - 1];
    for (int t = 0; t < 2; ++t) {
      const ScopedGpuSettings use(v3.fp32_kernel, v3.gemm);
      setenv("FACEGEN_GPU_TILES", t == 0 ? "small" : "large", 1);
      shape[t] = std::make_unique<DeviceNetwork>(m.floats.data(), m.spec, Precision::Fp32);
      unsetenv("FACEGEN_GPU_TILES");
    }
  }
  static std::string key(int v) { return v < kFp32Variants ? kBenchArithmetics[v].key : v == 3 ? "fp32_wgmma1" : "fp32_wgmma_r2"; }
  // Variant v's network, in v's schedule.
  DeviceNetwork& operator[](int v) {
    if (v >= kFp32Variants - 1) dn[kFp32Variants - 1]->use_fp32_wgmma_schedule(v - (kFp32Variants - 1));
    return *dn[std::min(v, kFp32Variants - 1)];
  }
};

// Step 3 for one model: fp32 variants 1-4 layer by layer. Returns the number of mismatching layers.
template <typename Timer, typename Add>
int fp32_tc_layers(const BenchModel& m, const std::vector<float>& z, Timer time_ms, Add add) {
  constexpr int kN = 8192, kBatches[3] = {8192, 512, 64};
  Fp32Variants dn(m);
  PoisonedBuffers buffers;
  void* act[4];
  size_t largest = size_t(m.spec.image_values()) * 4;  // bytes of one image's largest layer output
  for (int s = 0; s < 4; ++s) {
    act[s] = buffers.make(dn[0].activation_bytes_per_image(s) * kN);
    largest = std::max(largest, dn[0].activation_bytes_per_image(s));
  }
  const float* zd = static_cast<const float*>(
      buffers.upload(std::vector<float>(z.begin(), z.begin() + size_t(kN) * m.spec.latent_dim)));
  void* out[Fp32Variants::kCount];
  for (void*& o : out) o = buffers.make(largest * kN);
  dn[0].projection(zd, kN, act[0], nullptr);
  for (int s = 0; s < 3; ++s) dn[0].tconv(s, act[s], kN, act[s + 1], nullptr);
  const char* names[kGpuLayers] = {"projection+bn+relu", "tconv1", "tconv2", "tconv3", "tconv4+tanh"};
  auto run = [&](int v, int l, int n, void* o) {
    DeviceNetwork& d = dn[v];
    if (l == 0) d.projection(zd, n, o, nullptr);
    else if (l < 4) d.tconv(l - 1, act[l - 1], n, o, nullptr);
    else d.output_layer(act[3], n, static_cast<float*>(o), nullptr);
  };
  int mismatches = 0;
  for (int l = 0; l < kGpuLayers; ++l) {
    const size_t count = (l < 4 ? dn[0].activation_bytes_per_image(l) / 4 : size_t(m.spec.image_values())) * kN;
    std::vector<float> got[Fp32Variants::kCount];
    for (int v = 0; v < Fp32Variants::kCount; ++v) {
      CUDA_CHECK(cudaMemset(out[v], 0xff, count * 4));
      run(v, l, kN, out[v]);
      got[v].resize(count);
      CUDA_CHECK(cudaMemcpy(got[v].data(), out[v], count * 4, cudaMemcpyDeviceToHost));
    }
    std::string verdict;
    for (int v = 1; v < Fp32Variants::kCount; ++v) {
      double worst = 0;
      size_t bad = 0;
      for (size_t i = 0; i < count; ++i) {
        const double d = std::fabs(double(got[v][i]) - got[0][i]);
        worst = std::max(worst, std::isfinite(d) ? d : INFINITY);
        bad += !(d <= 1e-4 + 1e-4 * std::fabs(got[0][i]));
      }
      mismatches += bad > 0;
      char buf[96];
      std::snprintf(buf, sizeof buf, " v%d-v1 %.1e%s", v + 1, worst, bad ? " MISMATCH" : "");
      verdict += buf;
    }
    const bool same34 = std::memcmp(got[2].data(), got[3].data(), count * 4) == 0;
    const bool same23 = std::memcmp(got[1].data(), got[2].data(), count * 4) == 0;
    mismatches += !same34;
    verdict += std::string("; v4 ") + (same34 ? "==" : "!= (MISMATCH)") + " v3; v3 " + (same23 ? "==" : "!=") + " v2";
    std::printf("  %-13s %-18s%s\n", m.name.c_str(), names[l], verdict.c_str());
    const double flop = layer_flops_per_image(m.spec, l);
    for (int b : kBatches) {
      std::printf("  %-13s %-18s batch %4d:", "", "", b);
      double ms[Fp32Variants::kCount];
      for (int v = 0; v < Fp32Variants::kCount; ++v) {
        ms[v] = time_ms([&] { run(v, l, b, out[v]); }, b == kN ? 10 : 30, nullptr);
        std::printf(" v%d %7.3f ms", v + 1, ms[v]);
        add(m.key + "_" + Fp32Variants::key(v) + "_layer" + std::to_string(l) + "_b" + std::to_string(b) + "_ms", ms[v]);
      }
      std::printf(" | v3 %5.1f TFLOP/s, %.2fx v1, %.2fx v2; v4, v5 %.2fx, %.2fx v3", flop * b / ms[2] / 1e9, ms[0] / ms[2],
                  ms[1] / ms[2], ms[2] / ms[3], ms[2] / ms[4]);
      if (l >= 1 && l <= 3 && b < kN) {  // v3's two tile shapes, one of which it picked by the grid
        for (int t = 0; t < 2; ++t) {
          const float shape_ms = time_ms([&] { dn.shape[t]->tconv(l - 1, act[l - 1], b, out[2], nullptr); }, 30, nullptr);
          std::printf("; %s %.3f ms", t == 0 ? "Small" : "Large", shape_ms);
          add(m.key + "_fp32_wgmma_" + (t == 0 ? "small" : "large") + "_layer" + std::to_string(l) + "_b" + std::to_string(b) + "_ms",
              shape_ms);
        }
      }
      std::printf("\n");
    }
  }
  return mismatches;
}

// `--fp32-tc-layer MODEL:VARIANT:STAGE:BATCH`: tconv stage STAGE (0..2) of MODEL (faces, shpc) at
// BATCH images, three times on random activations, in VARIANT (a key of kBenchArithmetics, or
// fp32_wgmma1: variant 3 in schedule 1). For a profiler, which then sees three launches of the stage's
// kernel and little else.
inline int fp32_tc_profile_layer(const std::string& what, const std::vector<float>& shpc) {
  char model[16] = {}, variant[32] = {};
  int stage = -1, batch = 0;
  if (std::sscanf(what.c_str(), "%15[a-z]:%31[a-z0-9_]:%d:%d", model, variant, &stage, &batch) != 4 || stage < 0 || stage > 2 ||
      batch < 1)
    throw std::invalid_argument("--fp32-tc-layer takes MODEL:VARIANT:STAGE:BATCH (faces or shpc, a variant, 0..2, a count), not '" +
                                what + "'");
  const std::string v = variant;
  const BenchArithmetic& a = bench_arithmetic(v == "fp32_wgmma1" ? "fp32_wgmma" : v);
  const Network faces = load_network("models/facegen-faces.safetensors");
  const bool is_faces = std::string(model) == "faces";
  const ModelSpec spec = is_faces ? faces.spec() : kShpcSpec;
  const std::vector<float>& floats = is_faces ? faces.floats() : shpc;
  const ScopedGpuSettings use(a.fp32_kernel, a.gemm);
  DeviceNetwork dn(floats.data(), spec, a.precision);
  if (v == "fp32_wgmma1") dn.use_fp32_wgmma_schedule(1);
  PoisonedBuffers b;
  const size_t in_bytes = dn.activation_bytes_per_image(stage) * batch;
  std::vector<float> x(in_bytes / 4);
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> u(0.f, 1.5f);
  for (float& f : x) f = a.precision == Precision::Fp32 ? u(rng) : round_to_tf32(u(rng));
  void* in = b.make(in_bytes);
  if (a.precision != Precision::Bf16) CUDA_CHECK(cudaMemcpy(in, x.data(), in_bytes, cudaMemcpyHostToDevice));
  else CUDA_CHECK(cudaMemset(in, 0x3f, in_bytes));  // every bfloat16 0.74609375
  void* out = b.make(dn.activation_bytes_per_image(stage + 1) * batch);
  for (int r = 0; r < 3; ++r) dn.tconv(stage, in, batch, out, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  std::printf("ran tconv%d of the %s model in %s (%s) at batch %d three times\n", stage + 1, model, v.c_str(),
              gemm_kernel_name(dn.gemm_kernel()), batch);
  return 0;
}

// The whole section. time_ms(f, reps, stream): the median milliseconds of f; add(key, value): a figure
// for results.json. Returns the number of failed checks.
template <typename Timer, typename Add>
int bench_fp32_tensor_cores(const std::string& out, const std::vector<float>& z, const std::vector<float>& shpc, bool quick,
                            Timer time_ms, Add add) {
  const Network faces_net = load_network("models/facegen-faces.safetensors");
  const BenchModel models[2] = {{"faces model", "faces", faces_net.spec(), faces_net.floats()}, {"SHPC network", "shpc", kShpcSpec, shpc}};
  std::printf("\n== fp32 on tensor cores (3xTF32) beside fp32 FFMA, tf32 and bf16: the default model (%s) and the SHPC network ==\n",
              describe_spec(models[0].spec).c_str());
  int failed = 0;
  for (const BenchModel& m : models) {
    std::vector<std::vector<double>> ref(kValidatedImages);
    std::vector<std::thread> threads;
    for (int k = 0; k < kValidatedImages; ++k)
      threads.emplace_back([&, k] { ref[k] = reference::forward(m.floats, &z[size_t(k) * m.spec.latent_dim], m.spec); });
    for (auto& t : threads) t.join();
    for (const BenchArithmetic& a : kBenchArithmetics) failed += fp32_tc_validate(m, a, z, ref);
  }

  const int batches[] = {64, 512, 8192};
  std::printf("\nimages/s, kernels alone (graph replays)       batch 64     batch 512    batch 8192\n");
  for (const BenchModel& m : models) {
    double ffma[3] = {};
    for (const BenchArithmetic& a : kBenchArithmetics) {
      double rate[3];
      for (int b = 0; b < 3; ++b) {
        const int B = batches[b];
        const ScopedGpuSettings use(a.fp32_kernel, a.gemm);
        GpuPipeline pipe(m.floats.data(), m.spec, a.precision, B, 0);
        CUDA_CHECK(cudaMemcpy(pipe.device_latents(0), z.data(), size_t(B) * m.spec.latent_dim * 4, cudaMemcpyHostToDevice));
        const int inner = std::max(1, 8192 / B);  // ~8192 images per timed repetition
        const float ms = time_ms([&] { for (int r = 0; r < inner; ++r) pipe.run_slot(0, B); }, quick ? 3 : 7,
                                 pipe.compute_stream());
        rate[b] = double(B) * inner / (ms / 1e3);
        add(m.key + "_" + a.key + "_b" + std::to_string(B) + "_kernels", rate[b]);
      }
      if (std::string(a.key) == "fp32_ffma") std::copy(rate, rate + 3, ffma);
      std::printf("  %-13s %-30s %10.0f   %10.0f   %10.0f", m.name.c_str(), a.name, rate[0], rate[1], rate[2]);
      if (a.precision == Precision::Fp32 && std::string(a.key) != "fp32_ffma")
        std::printf("   (%.2fx, %.2fx, %.2fx FFMA's)", rate[0] / ffma[0], rate[1] / ffma[1], rate[2] / ffma[2]);
      std::printf("\n");
    }
  }
  std::printf("\nfp32 layer by layer, variants 1 FFMA, 2 tensor cores on mma.sync, 3 on wgmma, 4 on wgmma in schedule 1,\n"
              "5 on wgmma with an FADD every two k steps, on the same activations (max |vN - v1|; bytes of v4 against\n"
              "v3 and v3 against v2), then their times:\n");
  for (const BenchModel& m : models) failed += fp32_tc_layers(m, z, time_ms, add);
  failed += fp32_tc_accuracy(models[0].floats, models[0].spec, models[1].floats, out, add);
  std::printf("fp32 on tensor cores: %s\n", failed ? "MISMATCH or non-finite values (see above)" : "every check passed");
  return failed;
}

}  // namespace facegen
