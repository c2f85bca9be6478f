// tutorial_bench.cuh: the PyTorch DCGAN tutorial's generator (nz 100, ngf 64, nc 3, 4x4 kernels, no
// biases) on the fixed-shape CUDA kernels and, beside them, on the any-shape ones
// (kernels/generator_gpu.hpp), for build/facegen-bench next to the SHPC network's figures.
//
// Validates first: each precision's first 8 images of a batch of 256, on both kinds of kernel, against
// the float64 reference (tests/gpu/reference.hpp) within the GPU tests' image tolerances; then times
// the kernels alone (graph replays, latents and images on the device) at batch 64, 512, 1024 and
// 8192: the fixed-shape kernels, the any-shape ones, and the SHPC network's fixed-shape kernels. Writes
// tutorial_network.bin (the flat float layout of generator/network.hpp) and
// tutorial_images_<precision>.bin (256 images of the fixed-shape kernels) into the output folder for
// bench/pytorch_reference.py, which runs torch.compile of the same model on the same latents.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cuda_check.cuh"
#include "common/model_spec.hpp"
#include "generator/gpu_pipeline.hpp"
#include "tests/gpu/reference.hpp"

namespace facegen {

// FACEGEN_GPU_KERNELS set for the pipelines made in one scope (kernels/generator_gpu.hpp).
struct ScopedKernels {
  explicit ScopedKernels(const char* kernels) { setenv("FACEGEN_GPU_KERNELS", kernels, 1); }
  ~ScopedKernels() { unsetenv("FACEGEN_GPU_KERNELS"); }
};

// Multiply-adds x 2 of one image, every tap of every input pixel counted (as the SHPC figure is).
inline double tutorial_flops_per_image(const ModelSpec& s) {
  double f = 2.0 * s.latent_dim * s.proj_outputs();
  for (int i = 0; i < 4; ++i) {
    const double h = ModelSpec::stage_size(i);
    f += 2.0 * h * h * s.kernel_size * s.kernel_size * s.stage_channels(i) * s.stage_channels(i + 1);
  }
  return f;
}

// z: at least 8192 latents of 100 values; shpc: the SHPC network timed beside it (network.bin layout).
// time_ms(f, reps, stream): the median milliseconds of f.
// add(key, value): a figure for results.json. Returns the number of precisions whose images failed.
template <typename Timer, typename Add>
int bench_tutorial_network(const std::string& out, const std::vector<float>& z, const std::vector<float>& shpc, bool quick,
                           Timer time_ms, Add add) {
  const ModelSpec spec = kTutorialSpec;
  const auto net = reference::random_network(3, spec);
  {
    std::ofstream f(out + "/tutorial_network.bin", std::ios::binary);
    f.write(reinterpret_cast<const char*>(net.data()), net.size() * 4);
    if (!f) throw std::runtime_error("cannot write " + out + "/tutorial_network.bin");
  }
  const double flops = tutorial_flops_per_image(spec);
  std::printf("\n== PyTorch DCGAN tutorial generator (nz 100, ngf 64, nc 3, k 4, no biases; %.0f MFLOP per image): "
              "fixed-shape kernels, any-shape kernels (FACEGEN_GPU_KERNELS=any), and the SHPC network ==\n",
              flops / 1e6);
  constexpr int kChecked = 8, kSaved = 256;
  std::vector<std::vector<double>> ref(kChecked);
  for (int i = 0; i < kChecked; ++i) ref[i] = reference::forward(net, &z[size_t(i) * spec.latent_dim], spec);
  int failed = 0;
  for (Precision p : {Precision::Fp32, Precision::Tf32, Precision::Bf16}) {
    const char* pname = precision_name(p);
    const double tol = p == Precision::Fp32 ? 1e-5 : p == Precision::Tf32 ? 5e-3 : 5e-2;
    for (const char* kernels : {"any", "auto"}) {  // validate both; keep the fixed-shape kernels' 256 images for PyTorch
      ScopedKernels use(kernels);
      const char* label = std::string(kernels) == "any" ? "any-shape" : "fixed-shape";
      GpuPipeline pipe(net.data(), spec, p, kSaved, 0);
      CUDA_CHECK(cudaMemcpy(pipe.device_latents(0), z.data(), size_t(kSaved) * spec.latent_dim * 4, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemset(pipe.device_images(0), 0xff, size_t(kSaved) * spec.image_values() * 4));
      pipe.run_slot(0, kSaved);
      CUDA_CHECK(cudaStreamSynchronize(pipe.compute_stream()));
      std::vector<float> img(size_t(kSaved) * spec.image_values());
      CUDA_CHECK(cudaMemcpy(img.data(), pipe.device_images(0), img.size() * 4, cudaMemcpyDeviceToHost));
      double worst = 0;
      size_t bad = 0;
      for (int i = 0; i < kChecked; ++i)
        for (int v = 0; v < spec.image_values(); ++v) {
          const double d = std::fabs(img[size_t(i) * spec.image_values() + v] - ref[i][v]);
          worst = std::max(worst, d);
          bad += !(d <= tol);
        }
      for (float v : img) bad += !std::isfinite(v);
      failed += bad > 0;
      std::printf("  %s %s: first %d images vs float64: max |error| %.2e (limit %g)%s\n", pname, label, kChecked, worst,
                  tol, bad ? "  MISMATCH" : "");
      std::ofstream f(out + "/tutorial_images_" + pname + ".bin", std::ios::binary);
      f.write(reinterpret_cast<const char*>(img.data()), img.size() * 4);
      if (!f) throw std::runtime_error("cannot write tutorial images into " + out);
      add(std::string("tutorial_") + pname + "_" + kernels + "_max_error", worst);
    }
    for (int B : {64, 512, 1024, 8192}) {  // 512: facegen's default --batch
      double rate[3];  // tutorial on the fixed-shape kernels, on the any-shape ones; SHPC
      for (int k = 0; k < 3; ++k) {
        ScopedKernels use(k == 1 ? "any" : "auto");
        GpuPipeline pipe(k == 2 ? shpc.data() : net.data(), k == 2 ? kShpcSpec : spec, p, B, 0);
        CUDA_CHECK(cudaMemcpy(pipe.device_latents(0), z.data(), size_t(B) * spec.latent_dim * 4, cudaMemcpyHostToDevice));
        const int inner = std::max(1, 8192 / B);  // ~8192 images per timed repetition
        const float ms = time_ms([&] { for (int r = 0; r < inner; ++r) pipe.run_slot(0, B); }, quick ? 3 : 7,
                                 pipe.compute_stream());
        rate[k] = double(B) * inner / (ms / 1e3);
      }
      std::printf("  %s batch %5d: fixed-shape %9.0f images/s (%5.1f TFLOP/s), any-shape %9.0f; SHPC network: %9.0f\n",
                  pname, B, rate[0], rate[0] * flops / 1e12, rate[1], rate[2]);
      add(std::string("tutorial_") + pname + "_b" + std::to_string(B) + "_kernels", rate[0]);
      add(std::string("tutorial_any_") + pname + "_b" + std::to_string(B) + "_kernels", rate[1]);
      add(std::string("tutorial_shpc_") + pname + "_b" + std::to_string(B) + "_kernels", rate[2]);
    }
  }
  std::printf("tutorial network: %s\n", failed ? "MISMATCH against float64 (see above)" : "images match float64 in every precision");
  return failed;
}

}  // namespace facegen
