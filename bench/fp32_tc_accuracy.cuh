// fp32_tc_accuracy.cuh: the errors against float64 of float32 on FFMA and on tensor cores (mma.sync
// and wgmma), for build/facegen-bench --fp32-tc (bench/fp32_tc_bench.cuh), layer by layer and whole
// (tests/gpu/layer_errors.hpp: each layer on the float64 pass's own input rounded to float32), on
// 1,000 images of the shipped faces model and 200 each of a random network of each family (the
// faces model's shape, and the SHPC network: the benchmark's random network.bin); tf32 and bf16 on
// the faces model's whole network beside them; and the wgmma kernels' schedule 2 (an FADD every two k
// steps) beside the shipped order.
//
// Writes KEY_network.bin (the flat float layout of generator/network.hpp) and KEY_latents.bin (its
// latents, float32 (n, 100)) for each network (KEY faces, rfaces, rshpc) into the output folder and
// every figure into results.json (KEY_VARIANT_layerL_worst / _mean, KEY_VARIANT_network_worst /
// _mean), for bench/pytorch_reference.py --fp32-tc, which adds PyTorch fp32's errors on the same
// images and the verdict.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/model_spec.hpp"
#include "common/precision.hpp"
#include "kernels/generator_gpu.hpp"
#include "tests/gpu/layer_errors.hpp"
#include "tests/gpu/reference.hpp"

namespace facegen {

// FACEGEN_GPU_FP32 and FACEGEN_GPU_GEMM for the networks made in one scope (kernels/generator_gpu.hpp);
// unset after.
struct ScopedGpuSettings {
  ScopedGpuSettings(const char* fp32_kernel, const char* gemm) {
    setenv("FACEGEN_GPU_FP32", fp32_kernel, 1);
    setenv("FACEGEN_GPU_GEMM", gemm, 1);
  }
  ~ScopedGpuSettings() {
    unsetenv("FACEGEN_GPU_FP32");
    unsetenv("FACEGEN_GPU_GEMM");
  }
  ScopedGpuSettings(const ScopedGpuSettings&) = delete;
  ScopedGpuSettings& operator=(const ScopedGpuSettings&) = delete;
};

struct BenchArithmetic {
  Precision precision;
  const char* fp32_kernel;  // FACEGEN_GPU_FP32
  const char* gemm;         // FACEGEN_GPU_GEMM
  const char* name;         // in the tables
  const char* key;          // in results.json
  double image_tol;         // the GPU tests' tolerance against float64
};
// The fp32 variants first: 1 FFMA, 2 tensor cores on mma.sync, 3 on wgmma (mma.sync again where wgmma
// does not run).
inline const BenchArithmetic kBenchArithmetics[] = {
    {Precision::Fp32, "ffma", "auto", "fp32 FFMA (v1)", "fp32_ffma", 1e-5},
    {Precision::Fp32, "tc", "mma", "fp32 tc mma.sync (v2)", "fp32_tc", 1e-5},
    {Precision::Fp32, "tc", "auto", "fp32 tc wgmma (v3)", "fp32_wgmma", 1e-5},
    {Precision::Tf32, "auto", "auto", "tf32", "tf32", 5e-3},
    {Precision::Bf16, "auto", "auto", "bf16", "bf16", 5e-2},
};
constexpr int kFp32Variants = 3;  // the first entries above
inline const BenchArithmetic& bench_arithmetic(const std::string& key) {
  for (const BenchArithmetic& a : kBenchArithmetics)
    if (key == a.key) return a;
  throw std::invalid_argument("no benchmark arithmetic '" + key + "'");
}

inline void write_floats(const std::string& path, const std::vector<float>& v) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  if (!f) throw std::runtime_error("cannot write " + path);
}

// One network's errors: prints the table, adds the figures. Returns the number of non-finite findings.
template <typename Add>
int fp32_network_errors(const std::string& key, const std::string& what, const std::vector<float>& floats, const ModelSpec& spec,
                        int images, uint64_t seed, bool with_tf32_bf16, const std::string& out, Add add) {
  std::vector<float> z(size_t(images) * spec.latent_dim);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd;
  for (float& v : z) v = nd(rng);
  write_floats(out + "/" + key + "_network.bin", floats);
  write_floats(out + "/" + key + "_latents.bin", z);
  const auto t0 = std::chrono::steady_clock::now();
  const LayerReference ref = make_layer_reference(floats, spec, z.data(), images);
  const double ref_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // kBenchArithmetics' fp32 variants, then the third in schedule 2 (an FADD every two k steps).
  constexpr int kForms = kFp32Variants + 1;
  const char* names[kForms] = {kBenchArithmetics[0].name, kBenchArithmetics[1].name, kBenchArithmetics[2].name,
                               "fp32 tc wgmma R2 (v5)"};
  const std::string keys[kForms] = {kBenchArithmetics[0].key, kBenchArithmetics[1].key, kBenchArithmetics[2].key,
                                    "fp32_wgmma_r2"};
  NetworkErrors e[kForms];
  for (int f = 0; f < kForms; ++f) {
    const BenchArithmetic& a = kBenchArithmetics[std::min(f, kFp32Variants - 1)];
    const ScopedGpuSettings use(a.fp32_kernel, a.gemm);
    DeviceNetwork dn(floats.data(), spec, Precision::Fp32);
    if (f == kFp32Variants) dn.use_fp32_wgmma_schedule(2);
    e[f] = measure_layer_errors(dn, ref);
  }
  std::printf("\n%d images of %s against float64 (float64 on the CPU in %.1f s), |error| worst / mean, and each against FFMA's:\n",
              images, what.c_str(), ref_s);
  std::printf("  %-20s", "layer");
  for (int f = 0; f < kForms; ++f) std::printf(" %-25s", names[f]);
  std::printf(" v2, v3, v5 / v1: worst, mean\n");
  const char* layers[kGpuLayers + 1] = {"projection+bn+relu", "tconv1+bn+relu", "tconv2+bn+relu", "tconv3+bn+relu", "tconv4+tanh",
                                       "network (images)"};
  int failed = 0;
  for (int l = 0; l <= kGpuLayers; ++l) {
    const std::string layer = l < kGpuLayers ? "layer" + std::to_string(l) : "network";
    std::printf("  %-20s", layers[l]);
    for (int f = 0; f < kForms; ++f) {
      const ErrorStats& s = l < kGpuLayers ? e[f].layer[l] : e[f].network;
      std::printf(" %10.3e / %10.3e  ", s.worst, s.mean());
      failed += s.not_finite > 0;
      add(key + "_" + keys[f] + "_" + layer + "_worst", s.worst);
      add(key + "_" + keys[f] + "_" + layer + "_mean", s.mean());
    }
    const ErrorStats& v1 = l < kGpuLayers ? e[0].layer[l] : e[0].network;
    for (int f = 1; f < kForms; ++f) {
      const ErrorStats& s = l < kGpuLayers ? e[f].layer[l] : e[f].network;
      std::printf(" %5.2f, %5.2f;", s.worst / v1.worst, s.mean() / v1.mean());
    }
    std::printf("\n");
  }
  if (with_tf32_bf16)
    for (Precision p : {Precision::Tf32, Precision::Bf16}) {
      const DeviceNetwork dn(floats.data(), spec, p);
      const ErrorStats s = measure_network_errors(dn, ref);
      std::printf("  %-20s %s: %10.3e / %10.3e (whole network only)\n", "network (images)", precision_name(p), s.worst, s.mean());
      add(key + "_" + precision_name(p) + "_network_worst", s.worst);
      add(key + "_" + precision_name(p) + "_network_mean", s.mean());
      failed += s.not_finite > 0;
    }
  return failed;
}

// The accuracy section: the faces model (1,000 images), a random faces-shaped network and the SHPC
// network shpc (200 each). Returns the number of networks with non-finite values.
template <typename Add>
int fp32_tc_accuracy(const std::vector<float>& faces, const ModelSpec& faces_spec, const std::vector<float>& shpc,
                     const std::string& out, Add add) {
  int failed = fp32_network_errors("faces", "the faces model", faces, faces_spec, 1000, 27, true, out, add);
  failed += fp32_network_errors("rfaces", "a random network of the faces model's shape (seed 28)",
                                reference::random_network(28, faces_spec), faces_spec, 200, 29, false, out, add);
  failed += fp32_network_errors("rshpc", "the random SHPC network (network.bin)", shpc, kShpcSpec, 200, 30, false, out, add);
  return failed;
}

}  // namespace facegen
