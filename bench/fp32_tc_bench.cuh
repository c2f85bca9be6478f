// fp32_tc_bench.cuh: float32 on tensor cores (3xTF32, kernels/cuda_helpers.cuh) beside float32 FFMA,
// tf32 and bf16, for build/facegen-bench (`facegen-bench --fp32-tc` runs this section alone).
//
// For the default model (models/facegen-faces.safetensors, 4x4 kernels) and the SHPC network (the
// benchmark's random network.bin, 5x5 kernels, biases):
//   1. validates each arithmetic first: 8 images against float64 within the GPU tests' image
//      tolerances, and a batch of 64's bytes equal to the same images in a batch of 8192;
//   2. times the kernels alone (latents and images on the device, graph replays) at batch 64, 512
//      and 8192 and prints them side by side: fp32 FFMA (variant 1), fp32 on tensor cores (variant 2),
//      tf32, bf16;
//   3. per layer at batch 8192 and 64: fp32 variant 1 (FFMA) and 2 (tensor cores) on the same
//      activations, variant 2 first compared with variant 1 (the GPU tests' fp32 layer tolerance).
// Then 1,000 images of the faces model against float64 (tests/gpu/layer_errors.hpp), worst and mean
// |error| layer by layer and whole, for both fp32 variants (and the whole network in tf32 and bf16).
// Writes faces_network.bin (the flat float layout of generator/network.hpp) and faces_latents.bin
// (the 1,000 latents) into the output folder, and every figure into results.json, for
// bench/pytorch_reference.py --fp32-tc, which adds PyTorch's errors on the same images.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/cuda_check.cuh"
#include "common/model_spec.hpp"
#include "generator/gpu_pipeline.hpp"
#include "generator/network.hpp"
#include "kernels/generator_gpu.hpp"
#include "tests/gpu/layer_errors.hpp"
#include "tests/gpu/reference.hpp"

namespace facegen {

// FACEGEN_GPU_FP32 for the networks made in one scope (kernels/generator_gpu.hpp); unset after.
struct ScopedFp32Kernel {
  explicit ScopedFp32Kernel(const char* kernel) { setenv("FACEGEN_GPU_FP32", kernel, 1); }
  ~ScopedFp32Kernel() { unsetenv("FACEGEN_GPU_FP32"); }
};

struct BenchArithmetic {
  Precision precision;
  const char* fp32_kernel;  // FACEGEN_GPU_FP32
  const char* name;         // in the table
  const char* key;          // in results.json
  double image_tol;         // the GPU tests' tolerance against float64
};
inline const BenchArithmetic kBenchArithmetics[] = {
    {Precision::Fp32, "ffma", "fp32 FFMA (variant 1)", "fp32_ffma", 1e-5},
    {Precision::Fp32, "tc", "fp32 tensor cores (variant 2)", "fp32_tc", 1e-5},
    {Precision::Tf32, "auto", "tf32", "tf32", 5e-3},
    {Precision::Bf16, "auto", "bf16", "bf16", 5e-2},
};

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
    const ScopedFp32Kernel use(a.fp32_kernel);
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

// Step 3 for one model: fp32 variants 1 and 2 layer by layer. Returns the number of mismatching layers.
template <typename Timer, typename Add>
int fp32_tc_layers(const BenchModel& m, const std::vector<float>& z, Timer time_ms, Add add) {
  constexpr int kN = 8192;
  std::unique_ptr<DeviceNetwork> dn[2];
  for (int v = 0; v < 2; ++v) {
    const ScopedFp32Kernel use(v == 0 ? "ffma" : "tc");
    dn[v] = std::make_unique<DeviceNetwork>(m.floats.data(), m.spec, Precision::Fp32);
  }
  PoisonedBuffers buffers;
  void* act[4];
  size_t largest = size_t(m.spec.image_values()) * 4;  // bytes of one image's largest layer output
  for (int s = 0; s < 4; ++s) {
    act[s] = buffers.make(dn[0]->activation_bytes_per_image(s) * kN);
    largest = std::max(largest, dn[0]->activation_bytes_per_image(s));
  }
  const float* zd = static_cast<const float*>(
      buffers.upload(std::vector<float>(z.begin(), z.begin() + size_t(kN) * m.spec.latent_dim)));
  void* out[2];
  for (void*& o : out) o = buffers.make(largest * kN);
  dn[0]->projection(zd, kN, act[0], nullptr);
  for (int s = 0; s < 3; ++s) dn[0]->tconv(s, act[s], kN, act[s + 1], nullptr);
  const char* names[kGpuLayers] = {"projection+bn+relu", "tconv1", "tconv2", "tconv3", "tconv4+tanh"};
  auto run = [&](int v, int l, int n, void* o) {
    if (l == 0) dn[v]->projection(zd, n, o, nullptr);
    else if (l < 4) dn[v]->tconv(l - 1, act[l - 1], n, o, nullptr);
    else dn[v]->output_layer(act[3], n, static_cast<float*>(o), nullptr);
  };
  int mismatches = 0;
  for (int l = 0; l < kGpuLayers; ++l) {
    const size_t count = (l < 4 ? dn[0]->activation_bytes_per_image(l) / 4 : size_t(m.spec.image_values())) * kN;
    std::vector<float> got[2];
    float ms[2][2];
    for (int v = 0; v < 2; ++v) {
      CUDA_CHECK(cudaMemset(out[v], 0xff, count * 4));
      run(v, l, kN, out[v]);
      got[v].resize(count);
      CUDA_CHECK(cudaMemcpy(got[v].data(), out[v], count * 4, cudaMemcpyDeviceToHost));
    }
    double worst = 0;
    size_t bad = 0;
    for (size_t i = 0; i < count; ++i) {
      const double d = std::fabs(double(got[1][i]) - got[0][i]);
      worst = std::max(worst, std::isfinite(d) ? d : INFINITY);
      bad += !(d <= 1e-4 + 1e-4 * std::fabs(got[0][i]));
    }
    mismatches += bad > 0;
    for (int v = 0; v < 2; ++v) {
      ms[v][0] = time_ms([&] { run(v, l, kN, out[v]); }, 10, nullptr);
      ms[v][1] = time_ms([&] { run(v, l, 64, out[v]); }, 50, nullptr);
    }
    const double flop = layer_flops_per_image(m.spec, l);
    std::printf("  %-13s %-18s batch 8192: variant 1 FFMA %7.3f ms, variant 2 tensor cores %7.3f ms (%5.1f TFLOP/s, %.2fx) | "
                "batch 64: %6.3f / %6.3f ms (%.2fx) | max |v2 - v1| %.2e%s\n",
                m.name.c_str(), names[l], ms[0][0], ms[1][0], flop * kN / ms[1][0] / 1e9, ms[0][0] / ms[1][0], ms[0][1],
                ms[1][1], ms[0][1] / ms[1][1], worst, bad ? "  MISMATCH" : "");
    for (int v = 0; v < 2; ++v) {
      const std::string key = m.key + (v == 0 ? "_fp32_ffma_layer" : "_fp32_tc_layer") + std::to_string(l);
      add(key + "_ms", ms[v][0]);
      add(key + "_b64_ms", ms[v][1]);
    }
  }
  return mismatches;
}

// The accuracy section: 1,000 images of the faces model against float64.
template <typename Add>
int fp32_tc_accuracy(const BenchModel& faces, const std::string& out, Add add) {
  constexpr int kImages = 1000;
  std::vector<float> z(size_t(kImages) * faces.spec.latent_dim);
  std::mt19937_64 rng(27);
  std::normal_distribution<float> nd;
  for (float& v : z) v = nd(rng);
  auto write = [&](const std::string& name, const std::vector<float>& v) {
    std::ofstream f(out + "/" + name, std::ios::binary);
    f.write(reinterpret_cast<const char*>(v.data()), v.size() * 4);
    if (!f) throw std::runtime_error("cannot write " + out + "/" + name);
  };
  write("faces_network.bin", faces.floats);
  write("faces_latents.bin", z);
  const auto t0 = std::chrono::steady_clock::now();
  const LayerReference ref = make_layer_reference(faces.floats, faces.spec, z.data(), kImages);
  const double ref_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  NetworkErrors e[2];
  for (int v = 0; v < 2; ++v) {
    const ScopedFp32Kernel use(v == 0 ? "ffma" : "tc");
    const DeviceNetwork dn(faces.floats.data(), faces.spec, Precision::Fp32);
    e[v] = measure_layer_errors(dn, ref);
  }
  std::printf("\n%d images of the faces model against float64 (float64 on the CPU in %.1f s), |error| worst / mean:\n", kImages, ref_s);
  std::printf("  %-20s %-25s %-25s %s\n", "layer", "fp32 FFMA (variant 1)", "fp32 tensor cores (v2)", "v2 / v1 worst, mean");
  const char* names[kGpuLayers + 1] = {"projection+bn+relu", "tconv1+bn+relu", "tconv2+bn+relu", "tconv3+bn+relu", "tconv4+tanh",
                                       "network (images)"};
  int failed = 0;
  for (int l = 0; l <= kGpuLayers; ++l) {
    const ErrorStats& a = l < kGpuLayers ? e[0].layer[l] : e[0].network;
    const ErrorStats& b = l < kGpuLayers ? e[1].layer[l] : e[1].network;
    failed += a.not_finite + b.not_finite > 0;
    std::printf("  %-20s %10.3e / %10.3e  %10.3e / %10.3e  %5.2f, %5.2f%s\n", names[l], a.worst, a.mean(), b.worst, b.mean(),
                b.worst / a.worst, b.mean() / a.mean(), a.not_finite + b.not_finite ? "  NOT FINITE" : "");
    const std::string layer = l < kGpuLayers ? "layer" + std::to_string(l) : "network";
    add("faces_fp32_ffma_" + layer + "_worst", a.worst);
    add("faces_fp32_ffma_" + layer + "_mean", a.mean());
    add("faces_fp32_tc_" + layer + "_worst", b.worst);
    add("faces_fp32_tc_" + layer + "_mean", b.mean());
  }
  for (Precision p : {Precision::Tf32, Precision::Bf16}) {
    const DeviceNetwork dn(faces.floats.data(), faces.spec, p);
    const ErrorStats s = measure_network_errors(dn, ref);
    std::printf("  %-20s %s: %10.3e / %10.3e (whole network only)\n", "network (images)", precision_name(p), s.worst, s.mean());
    add(std::string("faces_") + precision_name(p) + "_network_worst", s.worst);
    add(std::string("faces_") + precision_name(p) + "_network_mean", s.mean());
    failed += s.not_finite > 0;
  }
  return failed;
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
        const ScopedFp32Kernel use(a.fp32_kernel);
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
      if (std::string(a.key) == "fp32_tc")
        std::printf("   (%.2fx, %.2fx, %.2fx FFMA's)", rate[0] / ffma[0], rate[1] / ffma[1], rate[2] / ffma[2]);
      std::printf("\n");
    }
  }
  std::printf("\nfp32 layer by layer, variant 1 FFMA and variant 2 tensor cores on the same activations:\n");
  for (const BenchModel& m : models) failed += fp32_tc_layers(m, z, time_ms, add);
  failed += fp32_tc_accuracy(models[0], out, add);
  std::printf("fp32 on tensor cores: %s\n", failed ? "MISMATCH or non-finite values (see above)" : "every check passed");
  return failed;
}

}  // namespace facegen
