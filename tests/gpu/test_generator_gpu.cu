// test_generator_gpu.cu: every layer of the fixed-shape GPU kernels (kernels/generator_gpu.hpp) and
// precision against the float64 CPU reference, and the whole pipeline's images against the reference
// and against themselves across batch sizes, for both networks of that shape: the SHPC network (5x5
// kernels, biases) and the PyTorch tutorial's shape (4x4 kernels, no biases; the faces model).
//
// Fresh random weights and inputs each run (seed printed; FACEGEN_TEST_SEED repeats one), outputs
// poisoned with NaN first, batch sizes 1, 3, 127, 1000, 8192 (FACEGEN_GPU_TEST_MAX_BATCH caps them,
// for runs under compute-sanitizer; the tutorial shape stops at 1000). Large batches are checked in
// full for poison and against the reference at a few images (first, second, middle, last).
#include <doctest/doctest.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ios>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/half_float.hpp"
#include "generator/gpu_pipeline.hpp"
#include "generator/network.hpp"
#include "kernels/generator_gpu.hpp"
#include "formats/output_format.hpp"
#include "generator/finite_check.hpp"
#include "kernels/image_output.hpp"
#include "common/cuda_check.cuh"
#include "tests/gpu/gpu_test_support.cuh"
#include "tests/gpu/reference.hpp"

namespace facegen {
namespace {

// The networks whose every layer runs the fixed-shape kernels: the layer and pipeline cases run each.
const ModelSpec kTunedSpecs[] = {kShpcSpec, kTutorialSpec};

std::string spec_name(const ModelSpec& s) { return s.kernel_size == 5 ? "k5" : "k4"; }

// The batch sizes a spec's layer and pipeline cases run: all for the SHPC network, up to 1000 for the
// others (1000 already takes the image kernels and 127 the row tiles; batch 8192's random
// activations cost the CPU most of the run's time).
std::vector<int> batch_sizes_for(const ModelSpec& spec) {
  std::vector<int> sizes;
  for (int n : batch_sizes())
    if (spec == kShpcSpec || n <= 1000) sizes.push_back(n);
  return sizes;
}

// The GEMM kernel families this device and build can run for dn's precision.
std::vector<GemmKernel> gemm_kernels(DeviceNetwork& dn) {
  std::vector<GemmKernel> k = {GemmKernel::MmaSync};
  const GemmKernel chosen = dn.gemm_kernel();
  try {
    dn.use_gemm_kernel(GemmKernel::Wgmma);
    k.push_back(GemmKernel::Wgmma);
  } catch (const std::invalid_argument&) {
  }
  dn.use_gemm_kernel(chosen);
  return k;
}

}  // namespace

TEST_CASE("projection + batch norm + relu matches the float64 reference") {
  std::mt19937_64 rng(test_seed() + 1);
  for (const ModelSpec& spec : kTunedSpecs) {
  const auto net = reference::random_network(test_seed(), spec);
  const reference::Offsets o(spec);
  for (const Arithmetic& a : kArithmetics) {
    const Precision p = a.precision;
    const Fp32KernelScope fp32_kernel(a.fp32_kernel);
    DeviceNetwork dn(net.data(), spec, p);
    // tf32, bf16 and fp32 on tensor cores: the tensor-core kernel (the default) and the FFMA one; fp32
    // on FFMA: FFMA only.
    const bool has_mma = dn.projection_mma();
    CHECK(has_mma == (p != Precision::Fp32 || dn.fp32_kernel() == Fp32Kernel::TensorCores));
    for (bool mma : {true, false}) {
    if (mma && !has_mma) continue;
    dn.use_projection_mma(mma);
    for (int n : batch_sizes_for(spec)) {
      std::vector<float> z(static_cast<size_t>(n) * kLatentDim);
      std::normal_distribution<float> nd;
      for (auto& v : z) v = nd(rng);
      DeviceBuffer dz(z.size() * 4), dout(dn.activation_bytes_per_image(0) * n);
      CUDA_CHECK(cudaMemcpy(dz.p, z.data(), z.size() * 4, cudaMemcpyHostToDevice));
      dout.poison();
      dn.projection(static_cast<float*>(dz.p), n, dout.p, nullptr);
      std::vector<unsigned char> bytes(dout.bytes);
      CUDA_CHECK(cudaMemcpy(bytes.data(), dout.p, bytes.size(), cudaMemcpyDeviceToHost));
      auto ref = reference_images(sampled_images(n), [&](int img) {
        std::vector<double> x(kProjOutputs);
        for (int j = 0; j < kProjOutputs; ++j) {
          double s = net[o.proj_bias + j];
          for (int k = 0; k < kLatentDim; ++k) s += double(z[size_t(img) * kLatentDim + k]) * net[o.proj_weight + int64_t{k} * kProjOutputs + j];
          x[j] = s;
        }
        reference::bn_relu(x, &net[o.bn[0]], kStageChannels[0]);
        return x;
      });
      check(to_floats(bytes, p), n, kProjOutputs, ref, layer_tolerance(p),
            "projection " + spec_name(spec) + " " + a.name + (mma ? " mma" : " ffma") + " n=" + std::to_string(n));
    }
    }
  }
  }
}

TEST_CASE("phase-GEMM transposed convolutions match the float64 reference") {
  std::mt19937_64 rng(test_seed() + 2);
  for (const ModelSpec& spec : kTunedSpecs) {
  const auto net = reference::random_network(test_seed() + 3, spec);
  const reference::Offsets o(spec);
  for (const Arithmetic& a : kArithmetics) {
    const Precision p = a.precision;
    const Fp32KernelScope fp32_kernel(a.fp32_kernel);
    DeviceNetwork dn(net.data(), spec, p);
    for (GemmKernel kernel : gemm_kernels(dn)) {
    dn.use_gemm_kernel(kernel);
    for (int stage = 0; stage < 3; ++stage) {
      const int h = kStageSize[stage], c_in = kStageChannels[stage], c_out = kStageChannels[stage + 1];
      const size_t in_per = size_t(h) * h * c_in, out_per = size_t(4) * h * h * c_out;
      double worst = 0;
      for (int n : batch_sizes_for(spec)) {
        Activations in = make_activations(in_per * n, p, rng);
        DeviceBuffer din(in.bytes.size()), dout(dn.activation_bytes_per_image(stage + 1) * n);
        CUDA_CHECK(cudaMemcpy(din.p, in.bytes.data(), in.bytes.size(), cudaMemcpyHostToDevice));
        dout.poison();
        dn.tconv(stage, din.p, n, dout.p, nullptr);
        std::vector<unsigned char> bytes(dout.bytes);
        CUDA_CHECK(cudaMemcpy(bytes.data(), dout.p, bytes.size(), cudaMemcpyDeviceToHost));
        auto ref = reference_images(sampled_images(n), [&](int img) {
          std::vector<double> x(in.values.begin() + img * in_per, in.values.begin() + (img + 1) * in_per);
          auto y = reference::tconv(x, h, c_in, &net[o.tconv_weight[stage]], &net[o.tconv_bias[stage]], c_out,
                                    spec.kernel_size);
          reference::bn_relu(y, &net[o.bn[stage + 1]], c_out);
          return y;
        });
        worst = std::max(worst, check(to_floats(bytes, p), n, out_per, ref, layer_tolerance(p),
                                      std::string("tconv stage ") + std::to_string(stage) + " " + spec_name(spec) + " " + a.name + " " +
                                          gemm_kernel_name(kernel) + " n=" + std::to_string(n)));
      }
      MESSAGE("tconv stage " << stage << " " << spec_name(spec) << " " << a.name << " " << std::string(gemm_kernel_name(kernel))
                             << ": worst abs error " << worst);
    }
    }
  }
  }
}

TEST_CASE("wgmma and mma.sync phase GEMMs agree within their rounding, in every wgmma tile form") {
  // On an sm_90 GPU with the sm_90a kernels: each tconv stage at 127 images through both kernel
  // families; on wgmma both the image kernel (forced, in both rings) and the row tiles, whose bytes
  // must all be equal; elsewhere the case only checks that wgmma is refused with a clear error.
  std::mt19937_64 rng(test_seed() + 12);
  for (const ModelSpec& spec : kTunedSpecs) {
  const auto net = reference::random_network(test_seed() + 13, spec);
  for (Precision p : {Precision::Tf32, Precision::Bf16}) {
    DeviceNetwork dn(net.data(), spec, p);
    if (gemm_kernels(dn).size() == 1) {
      CHECK_THROWS_AS(dn.use_gemm_kernel(GemmKernel::Wgmma), std::invalid_argument);
      continue;
    }
    const int n = std::min(127, batch_sizes().back());
    for (int stage = 0; stage < 3; ++stage) {
      const size_t in_per = size_t(kStageSize[stage]) * kStageSize[stage] * kStageChannels[stage];
      Activations in = make_activations(in_per * n, p, rng);
      DeviceBuffer din(in.bytes.size());
      CUDA_CHECK(cudaMemcpy(din.p, in.bytes.data(), in.bytes.size(), cudaMemcpyHostToDevice));
      // Forms: mma.sync (the yardstick), then forced on wgmma: the image kernel, the row tiles and the
      // image kernel's ring 1 (at 127 images tconv() itself would pick the row tiles for tconv1-2).
      struct Form {
        GemmKernel kernel;
        bool image;
        int ring;
        const char* what;
      };
      const std::vector<Form> forms = {{GemmKernel::MmaSync, false, 0, "mma.sync"},
                                       {GemmKernel::Wgmma, true, 0, "wgmma image"},
                                       {GemmKernel::Wgmma, false, 0, "wgmma row tiles"},
                                       {GemmKernel::Wgmma, true, 1, "wgmma image ring 1"}};
      std::vector<std::vector<unsigned char>> bytes(forms.size());
      std::vector<std::vector<float>> got(forms.size());
      for (size_t k = 0; k < forms.size(); ++k) {
        DeviceBuffer dout(dn.activation_bytes_per_image(stage + 1) * n);
        dout.poison();
        dn.use_gemm_kernel(forms[k].kernel);
        dn.use_wgmma_image(stage, forms[k].image, forms[k].ring);
        dn.tconv(stage, din.p, n, dout.p, nullptr);
        bytes[k].resize(dout.bytes);
        CUDA_CHECK(cudaMemcpy(bytes[k].data(), dout.p, dout.bytes, cudaMemcpyDeviceToHost));
        got[k] = to_floats(bytes[k], p);
      }
      dn.use_wgmma_image_by_grid();
      const Tolerance tol = layer_tolerance(p);
      for (size_t k = 1; k < forms.size(); ++k) {
        size_t bad = 0, not_finite = 0;
        for (size_t i = 0; i < got[0].size(); ++i) {
          not_finite += !std::isfinite(got[k][i]);
          if (!(std::fabs(got[k][i] - got[0][i]) <= tol.atol + tol.rtol * std::fabs(got[0][i])) && bad++ < 5)
            FAIL_CHECK(spec_name(spec) << " stage " << stage << " " << name(p) << " index " << i << ": " << forms[k].what << " " << got[k][i]
                                << ", mma.sync " << got[0][i]);
        }
        CHECK_MESSAGE(not_finite == 0, "stage " << stage << " " << name(p) << ": " << not_finite << " " << forms[k].what
                                                << " outputs not written");
      }
      // The batch size picks between the row tiles and the image kernel (DeviceNetwork::tconv): they
      // must give the same bytes, in both rings.
      CHECK_MESSAGE(bytes[1] == bytes[3], name(p) << ": tconv" << stage + 1 << "'s image kernel gives other bytes in ring 1");
      CHECK_MESSAGE(bytes[1] == bytes[2], name(p) << ": tconv" << stage + 1 << "'s image kernel and row tiles give other bytes");
      CHECK_THROWS_AS(dn.use_wgmma_image(stage, true, 2), std::invalid_argument);
    }
  }
  }
}

TEST_CASE("fp32 on wgmma: Small and Large tiles and schedules 0 and 1 give the same bytes; mma.sync agrees within fp32's rounding") {
  // fp32 on tensor cores, each tconv stage at 3 and 127 images (fresh random activations, outputs
  // poisoned): on an sm_90 GPU with the sm_90a kernels through the wgmma kernels in both tile shapes
  // (FACEGEN_GPU_TILES, read when a network is made) and schedules 0 and 1, whose bytes must all be
  // equal, and in schedule 2 (an FADD every two k steps: other sums, the same in both shapes); each
  // against mma.sync, the yardstick (the fp32 layer tolerance; whether schedule 0's bits are mma.sync's
  // is printed). Elsewhere the case only checks that wgmma is refused with a clear error.
  const char* before = std::getenv("FACEGEN_GPU_TILES");
  const std::string saved = before ? before : "";
  const Fp32KernelScope tc("tc");
  std::mt19937_64 rng(test_seed() + 14);
  for (const ModelSpec& spec : kTunedSpecs) {
    const auto net = reference::random_network(test_seed() + 15, spec);
    std::unique_ptr<DeviceNetwork> dn[2];  // Small, Large
    for (int t = 0; t < 2; ++t) {
      setenv("FACEGEN_GPU_TILES", t == 0 ? "small" : "large", 1);
      dn[t] = std::make_unique<DeviceNetwork>(net.data(), spec, Precision::Fp32);
    }
    if (before) setenv("FACEGEN_GPU_TILES", saved.c_str(), 1);
    else unsetenv("FACEGEN_GPU_TILES");
    if (gemm_kernels(*dn[0]).size() == 1) {
      CHECK_THROWS_AS(dn[0]->use_gemm_kernel(GemmKernel::Wgmma), std::invalid_argument);
      continue;
    }
    for (int n : {3, std::min(127, batch_sizes().back())}) {
      for (int stage = 0; stage < 3; ++stage) {
        const size_t in_per = size_t(kStageSize[stage]) * kStageSize[stage] * kStageChannels[stage];
        const Activations in = make_activations(in_per * n, Precision::Fp32, rng);
        DeviceBuffer din(in.bytes.size());
        CUDA_CHECK(cudaMemcpy(din.p, in.bytes.data(), in.bytes.size(), cudaMemcpyHostToDevice));
        struct Form {
          int tiles;  // dn[tiles]
          GemmKernel kernel;
          int schedule;
          const char* what;
        };
        const Form forms[] = {{1, GemmKernel::MmaSync, 0, "mma.sync"},
                              {0, GemmKernel::Wgmma, 0, "wgmma Small schedule 0"},
                              {1, GemmKernel::Wgmma, 0, "wgmma Large schedule 0"},
                              {0, GemmKernel::Wgmma, 1, "wgmma Small schedule 1"},
                              {1, GemmKernel::Wgmma, 1, "wgmma Large schedule 1"},
                              {0, GemmKernel::Wgmma, 2, "wgmma Small schedule 2"},
                              {1, GemmKernel::Wgmma, 2, "wgmma Large schedule 2"}};
        std::vector<std::vector<unsigned char>> bytes;
        for (const Form& f : forms) {
          DeviceNetwork& d = *dn[f.tiles];
          DeviceBuffer dout(d.activation_bytes_per_image(stage + 1) * n);
          dout.poison();
          d.use_gemm_kernel(f.kernel);
          d.use_fp32_wgmma_schedule(f.schedule);
          d.tconv(stage, din.p, n, dout.p, nullptr);
          bytes.emplace_back(dout.bytes);
          CUDA_CHECK(cudaMemcpy(bytes.back().data(), dout.p, dout.bytes, cudaMemcpyDeviceToHost));
        }
        const std::string at = spec_name(spec) + " tconv" + std::to_string(stage + 1) + " n=" + std::to_string(n);
        const std::vector<float> yard = to_floats(bytes[0], Precision::Fp32);
        const Tolerance tol = layer_tolerance(Precision::Fp32);
        for (size_t k : {size_t{1}, size_t{5}}) {  // schedule 0 (for 0 and 1) and schedule 2
          const std::vector<float> got = to_floats(bytes[k], Precision::Fp32);
          size_t bad = 0, not_finite = 0;
          double worst = 0;
          for (size_t i = 0; i < got.size(); ++i) {
            not_finite += !std::isfinite(got[i]) + !std::isfinite(yard[i]);
            const double d = std::fabs(double(got[i]) - yard[i]);
            worst = std::max(worst, std::isfinite(d) ? d : INFINITY);
            if (!(d <= tol.atol + tol.rtol * std::fabs(yard[i])) && bad++ < 5)
              FAIL_CHECK(at << " index " << i << ": " << forms[k].what << " " << got[i] << ", mma.sync " << yard[i]);
          }
          CHECK_MESSAGE(not_finite == 0, at << ": " << not_finite << " outputs not written or not finite");
          MESSAGE(at << ": " << forms[k].what << " against mma.sync, worst |difference| " << worst << "; "
                     << (bytes[k] == bytes[0] ? "the same bits" : "not the same bits"));
        }
        for (size_t k = 2; k < 5; ++k)
          CHECK_MESSAGE(bytes[k] == bytes[1], at << ": " << forms[k].what << " gives other bytes than " << forms[1].what);
        CHECK_MESSAGE(bytes[6] == bytes[5], at << ": " << forms[6].what << " gives other bytes than " << forms[5].what);
      }
    }
  }
}

TEST_CASE("last transposed convolution + tanh matches the float64 reference") {
  std::mt19937_64 rng(test_seed() + 4);
  for (const ModelSpec& spec : kTunedSpecs) {
  const auto net = reference::random_network(test_seed() + 5, spec);
  const reference::Offsets o(spec);
  const int k = spec.kernel_size;
  // |weights|, for each output's sum of |products| (the bound of the bf16 tensor-core kernel's two
  // weight terms: each weight within 2^-18 of itself, kernels/tconv_output_mma.cuh).
  const size_t kOutWeights = size_t(k) * k * 3 * 64;
  std::vector<float> abs_weight(net.begin() + o.tconv_weight[3], net.begin() + o.tconv_weight[3] + kOutWeights);
  for (float& w : abs_weight) w = std::fabs(w);
  const float no_bias[3] = {0.f, 0.f, 0.f};
  for (const Arithmetic& a : kArithmetics) {
    const Precision p = a.precision;
    const Fp32KernelScope fp32_kernel(a.fp32_kernel);
    DeviceNetwork dn(net.data(), spec, p);
    const size_t in_per = size_t(32) * 32 * 64;
    const bool on_tensor_cores = p != Precision::Fp32 || dn.fp32_kernel() == Fp32Kernel::TensorCores;
    // tf32, bf16, fp32 on tensor cores: the direct FFMA kernel, then tensor cores (GEMM + col2im)
    for (bool mma : {false, true}) {
    if (mma && !on_tensor_cores) continue;
    dn.use_output_mma(mma);
    if (dn.output_mma() != mma) {  // a device with too little shared memory per block
      MESSAGE(a.name << " tconv4 on tensor cores: not on this device (too little shared memory per block)");
      continue;
    }
    for (int n : batch_sizes_for(spec)) {
      Activations in = make_activations(in_per * n, p, rng);
      DeviceBuffer din(in.bytes.size()), dout(size_t(4) * kImageValues * n);
      CUDA_CHECK(cudaMemcpy(din.p, in.bytes.data(), in.bytes.size(), cudaMemcpyHostToDevice));
      dout.poison();
      dn.output_layer(din.p, n, static_cast<float*>(dout.p), nullptr);
      std::vector<float> got(size_t(kImageValues) * n);
      CUDA_CHECK(cudaMemcpy(got.data(), dout.p, dout.bytes, cudaMemcpyDeviceToHost));
      auto ref = reference_images(sampled_images(n), [&](int img) {
        std::vector<double> x(in.values.begin() + img * in_per, in.values.begin() + (img + 1) * in_per);
        auto y = reference::tconv(x, 32, 64, &net[o.tconv_weight[3]], &net[o.tconv_bias[3]], 3, k);
        for (double& v : y) v = std::tanh(v);
        return y;
      });
      const std::string what = "output layer " + spec_name(spec) + " " + a.name + (mma ? " mma" : " direct") + " n=" + std::to_string(n);
      if (!(mma && p == Precision::Bf16)) {
        check(got, n, kImageValues, ref, Tolerance{1e-5, 0}, what);
        continue;
      }
      // bf16 on tensor cores: 1e-5 (float32 accumulation) + 2^-17 of each output's sum of |products|.
      check(got, n, kImageValues, ref, Tolerance{1.0, 0}, what);  // everything written and finite
      int bad = 0;
      double worst_ratio = 0;
      for (const auto& [img, r] : ref) {
        std::vector<double> ax(in.values.begin() + img * in_per, in.values.begin() + (img + 1) * in_per);
        for (double& v : ax) v = std::fabs(v);
        const auto sum_abs = reference::tconv(ax, 32, 64, abs_weight.data(), no_bias, 3, k);
        for (size_t i = 0; i < kImageValues; ++i) {
          const double d = std::fabs(got[img * kImageValues + i] - r[i]), bound = 1e-5 + std::ldexp(sum_abs[i], -17);
          worst_ratio = std::max(worst_ratio, d / bound);
          if (!(d <= bound) && bad++ < 5)
            FAIL_CHECK(what << ": image " << img << " index " << i << ": error " << d << " over its bound " << bound);
        }
      }
      MESSAGE(what << ": worst error / bound " << worst_ratio);
    }
    }
  }
  }
}

TEST_CASE("pipeline images match the float64 reference and do not depend on the batch size") {
  for (const ModelSpec& spec : kTunedSpecs) {
  const auto net = reference::random_network(test_seed() + 6, spec);
  const auto sizes = batch_sizes_for(spec);
  const int n_max = sizes.back();
  std::mt19937_64 rng(test_seed() + 7);
  std::normal_distribution<float> nd;
  std::vector<float> z(size_t(n_max) * kLatentDim);
  for (auto& v : z) v = nd(rng);
  std::vector<int> all_samples;
  for (int n : sizes)
    for (int i : sampled_images(n)) all_samples.push_back(i);
  std::sort(all_samples.begin(), all_samples.end());
  all_samples.erase(std::unique(all_samples.begin(), all_samples.end()), all_samples.end());
  const auto ref =
      reference_images(all_samples, [&](int img) { return reference::forward(net, &z[size_t(img) * kLatentDim], spec); });

  for (const Arithmetic& a : kArithmetics) {
    const Precision p = a.precision;
    const Fp32KernelScope fp32_kernel(a.fp32_kernel);
    const double emulated = emulated_rounding_error(net, spec, p, all_samples, z, ref);
    const Tolerance tol{std::max(image_tolerance(p).atol, 2 * emulated), 0};
    GpuPipeline pipe(net.data(), spec, p, n_max, 0);
    for (int l = 0; l < kGpuLayers; ++l) REQUIRE(pipe.network().fixed_shape(l));
    std::vector<float> first;  // images of the largest batch, the byte-for-byte yardstick
    double worst = 0;
    for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) {
      const int n = *it;
      std::vector<float> images(size_t(n) * kImageValues);
      std::memset(images.data(), 0xff, images.size() * 4);
      pipe.generate(z.data(), n, images.data());
      std::map<int, std::vector<double>> r;
      for (int i : sampled_images(n)) r[i] = ref.at(i);
      worst = std::max(worst, check(images, n, kImageValues, r, tol,
                                    "pipeline " + spec_name(spec) + " " + a.name + " n=" + std::to_string(n)));
      if (first.empty()) first = images;
      else CHECK_MESSAGE(std::memcmp(images.data(), first.data(), images.size() * 4) == 0,
                         spec_name(spec) << " " << a.name << ": images of a batch of " << n
                                         << " differ from the same images in a batch of " << n_max);
    }
    // Several batches per call (a partial last one) through both slots and the graphs.
    GpuPipeline small(net.data(), spec, p, std::min(127, n_max), 0);
    const int n = std::min(1000, n_max);
    std::vector<float> images(size_t(n) * kImageValues);
    std::memset(images.data(), 0xff, images.size() * 4);
    small.generate(z.data(), n, images.data());
    CHECK_MESSAGE(std::memcmp(images.data(), first.data(), images.size() * 4) == 0,
                  a.name << ": " << n << " images in batches of " << small.max_batch() << " differ from one batch");
    MESSAGE("pipeline " << spec_name(spec) << " " << a.name << ": worst abs error vs float64 " << worst << " (tolerance "
                        << tol.atol << ")");
  }
  }
}

TEST_CASE("generate_each hands over every image once, in order, with the bytes generate writes") {
  const auto net = reference::random_network(test_seed() + 8);
  const int n_max = batch_sizes().back();
  // Batches of more than one download chunk, and a last batch that ends inside a chunk.
  const int batch = std::min(n_max, GpuPipeline::kChunkImages * 2 + 5);
  const int n = std::min(n_max, 3 * batch + 7);
  std::mt19937_64 rng(test_seed() + 9);
  std::normal_distribution<float> nd;
  std::vector<float> z(size_t(n) * kLatentDim);
  for (auto& v : z) v = nd(rng);
  for (Precision p : {Precision::Fp32, Precision::Bf16}) {  // float32 and float16 over PCIe
    GpuPipeline pipe(net.data(), p, batch, 0);
    CHECK(pipe.transfer() == image_transfer(p));
    std::vector<float> want(size_t(n) * kImageValues), got(want.size()), by_value(want.size());
    std::memset(want.data(), 0xff, want.size() * 4);
    std::memset(got.data(), 0xff, got.size() * 4);
    std::memset(by_value.data(), 0xff, by_value.size() * 4);
    pipe.generate(z.data(), n, want.data());
    int64_t next = 0;
    int calls = 0;
    pipe.generate_each(z.data(), n, [&](int64_t first, const PinnedImages& images) {
      REQUIRE(first == next);
      REQUIRE(images.count >= 1);
      REQUIRE(images.count <= GpuPipeline::kChunkImages);
      REQUIRE(first + images.count <= n);
      REQUIRE(images.format == pipe.transfer());
      REQUIRE(images.values_per_image == kImageValues);
      images.to_floats(0, images.values(), &got[size_t(first) * kImageValues]);
      for (size_t i = 0; i < images.values(); ++i) by_value[size_t(first) * kImageValues + i] = images.value(i);
      next = first + images.count;
      ++calls;
    });
    CHECK(next == n);
    CHECK(calls >= (n + GpuPipeline::kChunkImages - 1) / GpuPipeline::kChunkImages);
    CHECK_MESSAGE(std::memcmp(got.data(), want.data(), got.size() * 4) == 0, name(p) << ": to_floats");
    CHECK_MESSAGE(std::memcmp(by_value.data(), want.data(), got.size() * 4) == 0, name(p) << ": value()");
  }
}

TEST_CASE("a run hands over its network's images: bf16's rounded to float16, fp32's and tf32's unchanged") {
  const auto net = reference::random_network(test_seed() + 12);
  const int n = std::min(131, batch_sizes().back());  // two batches of 120: a full one (graph) and a ragged one
  std::mt19937_64 rng(test_seed() + 13);
  std::normal_distribution<float> nd;
  std::vector<float> z(size_t(n) * kLatentDim);
  for (auto& v : z) v = nd(rng);
  for (Precision p : kPrecisions) {
    const int batch = std::min(n, 120);
    GpuPipeline pipe(net.data(), p, batch, 0);
    // The network's own float32 images, batch by batch, from the device.
    std::vector<float> network_images(size_t(n) * kImageValues);
    for (int first = 0; first < n; first += batch) {
      const int count = std::min(batch, n - first);
      CUDA_CHECK(cudaMemcpy(pipe.device_latents(0), &z[size_t(first) * kLatentDim], size_t(count) * kLatentDim * 4,
                            cudaMemcpyHostToDevice));
      pipe.run_slot(0, count);
      CUDA_CHECK(cudaStreamSynchronize(pipe.compute_stream()));
      CUDA_CHECK(cudaMemcpy(&network_images[size_t(first) * kImageValues], pipe.device_images(0),
                            size_t(count) * kImageValues * 4, cudaMemcpyDeviceToHost));
    }
    std::vector<float> got(network_images.size(), std::numeric_limits<float>::quiet_NaN());
    pipe.generate(z.data(), n, got.data());
    size_t wrong = 0;
    double moved = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const float want = p == Precision::Bf16 ? half_to_float(float_to_half(network_images[i])) : network_images[i];
      wrong += std::memcmp(&got[i], &want, 4) != 0;
      moved = std::max(moved, double(std::fabs(got[i] - network_images[i])));
    }
    CHECK_MESSAGE(wrong == 0, name(p) << ": " << wrong << " of " << got.size() << " values differ");
    if (p == Precision::Bf16) CHECK(moved <= 0x1p-12);  // images lie in [-1, 1]
    else CHECK(moved == 0);
  }
}

namespace {

// n images (n, 4096 nc) whose kinds cycle: tanh of normals; specials (float16 ties, the bytes' edges
// k / 127.5 - 1, the largest half and beyond, zeros, NaN, Inf) among them; any bits; every value
// exactly +-1; every value +-1 but one.
std::vector<float> finish_inputs(int n, int nc, std::mt19937_64& rng) {
  std::normal_distribution<float> nd;
  std::uniform_int_distribution<uint32_t> any_bits;
  const float specials[] = {0.f, -0.f, 1.f, -1.f, 1.f + 0x1p-11f, 1.f + 3 * 0x1p-11f, 0x1p-25f, 0x1p-20f, 65504.f,
                            65520.f, -70000.f, std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), 1.f / 127.5f - 1.f, 128.f / 127.5f - 1.f,
                            254.f / 127.5f - 1.f, 0x1p-140f};
  const int values = 4096 * nc;
  std::vector<float> in(size_t(n) * values);
  for (int i = 0; i < n; ++i) {
    float* image = &in[size_t(i) * values];
    const int kind = i % 5;
    for (int v = 0; v < values; ++v) {
      if (kind == 0) image[v] = std::tanh(nd(rng));
      else if (kind == 1) image[v] = v % 3 ? std::tanh(nd(rng)) : specials[(v / 3) % (sizeof specials / sizeof specials[0])];
      else if (kind == 2) {
        const uint32_t b = any_bits(rng);
        std::memcpy(&image[v], &b, 4);
      } else {
        image[v] = v % 2 ? 1.f : -1.f;
      }
    }
    if (kind == 4) image[any_bits(rng) % values] = 0.25f;
  }
  return in;
}

}  // namespace

TEST_CASE("finish_images: flags as scan_image, float16 as float_to_half, bytes as image_to_rgb8, nothing past n") {
  std::mt19937_64 rng(test_seed() + 14);
  for (int nc : {3, 1}) {
    const int values = 4096 * nc;
    for (int n : {1, 3, 77}) {
      const std::vector<float> in = finish_inputs(n, nc, rng);
      DeviceBuffer d_in(in.size() * 4);
      CUDA_CHECK(cudaMemcpy(d_in.p, in.data(), in.size() * 4, cudaMemcpyHostToDevice));
      for (gpu::ImageOutput output : {gpu::ImageOutput::None, gpu::ImageOutput::Float16, gpu::ImageOutput::Rgb8}) {
        for (bool round_half : {false, true}) {
          const bool rounded = round_half || output == gpu::ImageOutput::Float16;
          const size_t image_bytes = output == gpu::ImageOutput::Float16 ? size_t(values) * 2
                                     : output == gpu::ImageOutput::Rgb8 ? size_t(kRgb8ImageBytes) : 0;
          constexpr int kGuard = 2;  // images past n whose poison must stay
          DeviceBuffer d_out(std::max<size_t>(1, image_bytes * (n + kGuard))), d_flags(n + 64);
          d_out.poison();
          d_flags.poison();
          gpu::launch_finish_images(static_cast<const float*>(d_in.p), n, values, output, round_half, d_out.p,
                                    static_cast<uint8_t*>(d_flags.p), nullptr);
          CUDA_CHECK(cudaDeviceSynchronize());
          std::vector<unsigned char> out(image_bytes * (n + kGuard));
          std::vector<uint8_t> flags(n + 64);
          CUDA_CHECK(cudaMemcpy(out.data(), d_out.p, out.size(), cudaMemcpyDeviceToHost));
          CUDA_CHECK(cudaMemcpy(flags.data(), d_flags.p, flags.size(), cudaMemcpyDeviceToHost));
          int wrong_flags = 0, wrong_images = 0, seen_flags[4] = {};
          std::vector<float> host(values);  // (64, 64, nc): what the host would receive
          std::vector<unsigned char> rgb(kRgb8ImageBytes);
          for (int i = 0; i < n; ++i) {
            const float* image = &in[size_t(i) * values];
            for (int v = 0; v < values; ++v) host[v] = rounded ? half_to_float(float_to_half(image[v])) : image[v];
            const uint8_t want = scan_image(host.data(), values);
            wrong_flags += flags[i] != want;
            ++seen_flags[want & 3];
            const unsigned char* got = out.data() + image_bytes * i;
            if (output == gpu::ImageOutput::Rgb8) {
              image_to_rgb8(host.data(), nc, rgb.data());
              wrong_images += std::memcmp(got, rgb.data(), rgb.size()) != 0;
            } else if (output == gpu::ImageOutput::Float16) {
              for (int v = 0; v < values; ++v) {
                uint16_t h;
                std::memcpy(&h, got + 2 * v, 2);
                const bool both_nan = std::isnan(image[v]) && std::isnan(half_to_float(h));
                if (h != float_to_half(image[v]) && !both_nan) {
                  ++wrong_images;
                  break;
                }
              }
            }
          }
          const std::string what = "nc " + std::to_string(nc) + ", n " + std::to_string(n) + ", output " +
                                   std::to_string(int(output)) + ", round_half " + std::to_string(round_half);
          CHECK_MESSAGE(wrong_flags == 0, what << ": " << wrong_flags << " images flagged otherwise than scan_image");
          CHECK_MESSAGE(wrong_images == 0, what << ": " << wrong_images << " images differ from the CPU's conversion");
          if (n >= 5) {  // every kind of image was there, so the flags were not all alike
            CHECK(seen_flags[0] > 0);
            CHECK(seen_flags[kImageNonFinite] > 0);
            CHECK(seen_flags[kImageSaturated] > 0);
          }
          for (size_t k = image_bytes * n; k < out.size(); ++k) REQUIRE_MESSAGE(out[k] == 0xff, what << ": written past n");
          for (int k = n; k < n + 64; ++k) REQUIRE_MESSAGE(flags[k] == 0xff, what << ": a flag past n");
        }
      }
    }
  }
}

TEST_CASE("8-bit runs: the pipeline's pixels and flags equal the host's conversion and scan of its float images") {
  const auto net = reference::random_network(test_seed() + 15);
  const int n_max = batch_sizes().back();
  const int batch = std::min(n_max, GpuPipeline::kChunkImages + 5);  // two download chunks, a graph and a ragged batch
  const int n = std::min(n_max, 2 * batch + 3);
  std::mt19937_64 rng(test_seed() + 16);
  std::normal_distribution<float> nd;
  std::vector<float> z(size_t(n) * kLatentDim);
  for (auto& v : z) v = nd(rng);
  for (Precision p : kPrecisions) {
    GpuPipeline floats(net.data(), kShpcSpec, p, batch, 0);
    GpuPipeline pixels(net.data(), kShpcSpec, p, batch, 0, ImageEncoding::Rgb8);
    CHECK(pixels.transfer() == ImageTransfer::Rgb8);
    std::vector<float> images(size_t(n) * kImageValues);
    std::vector<uint8_t> float_flags(n, 0xee), pixel_flags(n + 16, 0xee);
    floats.generate_checked(z.data(), n, images.data(), float_flags.data());
    std::vector<unsigned char> got(size_t(n + 1) * kRgb8ImageBytes, 0xee), want(size_t(n) * kRgb8ImageBytes);
    pixels.generate_checked(z.data(), n, got.data(), pixel_flags.data());
    int wrong_flags = 0;
    for (int i = 0; i < n; ++i) {
      image_to_rgb8(&images[size_t(i) * kImageValues], 3, &want[size_t(i) * kRgb8ImageBytes]);
      const uint8_t scanned = scan_image(&images[size_t(i) * kImageValues], kImageValues);
      wrong_flags += (float_flags[i] != scanned) + (pixel_flags[i] != scanned);
    }
    CHECK_MESSAGE(wrong_flags == 0, name(p) << ": " << wrong_flags << " flags differ from scan_image");
    CHECK_MESSAGE(std::memcmp(got.data(), want.data(), want.size()) == 0, name(p) << ": pixels differ from image_to_rgb8");
    for (size_t k = want.size(); k < got.size(); ++k) REQUIRE(got[k] == 0xee);
    for (int k = n; k < n + 16; ++k) REQUIRE(pixel_flags[k] == 0xee);
    CHECK_THROWS_AS(pixels.generate(z.data(), 1, images.data()), std::logic_error);
  }
}

TEST_CASE("each layer runs the fixed-shape kernels exactly where its shape is theirs") {
  struct Case {
    ModelSpec spec;
    bool fixed[kGpuLayers];  // projection, tconv1-3, tconv4
  };
  const Case cases[] = {{kShpcSpec, {true, true, true, true, true}},
                        {kTutorialSpec, {true, true, true, true, true}},
                        {ModelSpec{100, 64, 3, 5, false}, {true, true, true, true, true}},
                        {ModelSpec{128, 64, 3, 4, false}, {false, true, true, true, true}},
                        {ModelSpec{100, 64, 1, 4, false}, {true, true, true, true, false}},
                        {ModelSpec{100, 32, 3, 4, false}, {false, false, false, false, false}},
                        {ModelSpec{100, 128, 3, 5, true}, {false, false, false, false, false}}};
  for (const Case& c : cases) {
    const auto net = reference::random_network(test_seed() + 20, c.spec);
    DeviceNetwork dn(net.data(), c.spec, Precision::Bf16);
    for (int l = 0; l < kGpuLayers; ++l)
      CHECK_MESSAGE(dn.fixed_shape(l) == c.fixed[l], "nz " << c.spec.latent_dim << " ngf " << c.spec.base_channels << " nc "
                                                            << c.spec.image_channels << ": layer " << l);
    dn.use_any_shape_kernels(true);
    for (int l = 0; l < kGpuLayers; ++l) CHECK(!dn.fixed_shape(l));
  }
  // FACEGEN_GPU_KERNELS=any does the same for every network made while it is set; a bad value is one sentence.
  const auto net = reference::random_network(test_seed() + 21);
  setenv("FACEGEN_GPU_KERNELS", "any", 1);
  {
    DeviceNetwork dn(net.data(), kShpcSpec, Precision::Fp32);
    for (int l = 0; l < kGpuLayers; ++l) CHECK(!dn.fixed_shape(l));
  }
  setenv("FACEGEN_GPU_KERNELS", "generic", 1);
  try {
    DeviceNetwork dn(net.data(), kShpcSpec, Precision::Fp32);
    FAIL("FACEGEN_GPU_KERNELS=generic was taken");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("FACEGEN_GPU_KERNELS must be any or auto") != std::string::npos);
  }
  unsetenv("FACEGEN_GPU_KERNELS");
}

TEST_CASE("FACEGEN_GPU_FP32 picks fp32's kernels when a network is made; a bad value is one sentence") {
  const auto net = reference::random_network(test_seed() + 22, kTutorialSpec);
  int device = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  // The wgmma kernels run here (an H100 or H200 and a binary with sm_90a code) where a tf32 network
  // picks them. auto: fp32 on tensor cores where its tconv stages run wgmma, FFMA elsewhere
  // (generator_gpu.hpp says why).
  const char* gemm_setting = std::getenv("FACEGEN_GPU_GEMM");  // set aside for this case, back at its end
  const bool had_gemm = gemm_setting != nullptr;
  const std::string saved_gemm = had_gemm ? gemm_setting : "";
  unsetenv("FACEGEN_GPU_GEMM");
  const bool wgmma = DeviceNetwork(net.data(), kTutorialSpec, Precision::Tf32).gemm_kernel() == GemmKernel::Wgmma;
  const Fp32Kernel native = wgmma && kFp32TensorCoresOnWgmma ? Fp32Kernel::TensorCores : Fp32Kernel::Ffma;
  struct Case {
    const char* value;  // nullptr: unset
    Fp32Kernel want;
  };
  const Case cases[] = {{nullptr, native}, {"auto", native}, {"ffma", Fp32Kernel::Ffma}, {"tc", Fp32Kernel::TensorCores}};
  for (const Case& c : cases) {
    if (c.want == Fp32Kernel::TensorCores && major < 8) continue;
    const Fp32KernelScope scope(c.value ? c.value : "auto");
    if (!c.value) unsetenv("FACEGEN_GPU_FP32");
    DeviceNetwork dn(net.data(), kTutorialSpec, Precision::Fp32);
    const std::string what = std::string("FACEGEN_GPU_FP32=") + (c.value ? c.value : "(unset)");
    CHECK_MESSAGE(dn.fp32_kernel() == c.want, what);
    const bool tc = c.want == Fp32Kernel::TensorCores;
    CHECK_MESSAGE(dn.projection_mma() == tc, what << ": the projection on tensor cores exactly where fp32 is");
    // On tensor cores the tconv stages run wgmma where it runs, and mma.sync on request; FFMA has neither.
    CHECK_MESSAGE(dn.gemm_kernel() == (tc && wgmma ? GemmKernel::Wgmma : GemmKernel::MmaSync), what);
    if (tc && wgmma) {
      dn.use_gemm_kernel(GemmKernel::MmaSync);
      CHECK(dn.gemm_kernel() == GemmKernel::MmaSync);
    }
    if (!tc) CHECK_THROWS_AS(dn.use_gemm_kernel(GemmKernel::Wgmma), std::invalid_argument);
    CHECK_THROWS_AS(dn.use_fp32_wgmma_schedule(3), std::invalid_argument);
    // tf32 and bf16 networks are not fp32's to choose for
    const DeviceNetwork tf32(net.data(), kTutorialSpec, Precision::Tf32);
    CHECK(tf32.fp32_kernel() == Fp32Kernel::Ffma);
  }
  {  // a width the fixed-shape (so the wgmma) kernels lack: FFMA unless asked for
    const Fp32KernelScope scope("auto");
    const ModelSpec narrow{100, 32, 3, 4, false};
    const auto narrow_net = reference::random_network(test_seed() + 23, narrow);
    const DeviceNetwork dn(narrow_net.data(), narrow, Precision::Fp32);
    CHECK(dn.fp32_kernel() == Fp32Kernel::Ffma);
    CHECK(dn.gemm_kernel() == GemmKernel::MmaSync);
  }
  for (Precision p : kPrecisions) {  // a bad value is refused whatever the precision
    const Fp32KernelScope scope("fast");
    try {
      DeviceNetwork dn(net.data(), kTutorialSpec, p);
      FAIL("FACEGEN_GPU_FP32=fast was taken for " << name(p));
    } catch (const std::invalid_argument& e) {
      const std::string msg = e.what();
      CHECK(msg.find("FACEGEN_GPU_FP32 must be tc, ffma or auto, not 'fast'") != std::string::npos);
      CHECK(msg.find('\n') == std::string::npos);
    }
  }
  if (had_gemm) setenv("FACEGEN_GPU_GEMM", saved_gemm.c_str(), 1);
}

TEST_CASE("fp32 on tensor cores is as exact as FFMA against float64, layer by layer and whole") {
  // Random networks of both tuned shapes (fresh each run) and the shipped faces model, 8 images each.
  const int n = 8;
  std::mt19937_64 rng(test_seed() + 41);
  std::normal_distribution<float> nd;
  std::vector<float> z(size_t(n) * kLatentDim);
  for (auto& v : z) v = nd(rng);
  for (const ModelSpec& spec : kTunedSpecs)
    check_fp32_tensor_cores_as_exact(reference::random_network(test_seed() + 40, spec), spec, z, n, 1e-5,
                                     "random " + spec_name(spec));
  const Network faces = load_network("models/facegen-faces.safetensors");
  check_fp32_tensor_cores_as_exact(faces.floats(), faces.spec(), z, n, 1e-5, "faces model");
}

TEST_CASE("Small, Large and image tiles give the same bytes in every precision and fp32 kernel") {
  const char* before = std::getenv("FACEGEN_GPU_TILES");
  const std::string saved = before ? before : "";
  for (const ModelSpec& spec : kTunedSpecs) {
  const auto net = reference::random_network(test_seed() + 10, spec);
  const int n = std::min(127, batch_sizes().back());
  std::mt19937_64 rng(test_seed() + 11);
  std::normal_distribution<float> nd;
  std::vector<float> z(size_t(n) * kLatentDim);
  for (auto& v : z) v = nd(rng);
  for (const Arithmetic& a : kArithmetics) {
    const Precision p = a.precision;
    const Fp32KernelScope fp32_kernel(a.fp32_kernel);
    std::vector<float> images[3];
    const char* shapes[3] = {"small", "large", "image"};
    for (int k = 0; k < 3; ++k) {
      setenv("FACEGEN_GPU_TILES", shapes[k], 1);
      GpuPipeline pipe(net.data(), spec, p, n, 0);  // DeviceNetwork reads FACEGEN_GPU_TILES when it is made
      images[k].assign(size_t(n) * kImageValues, std::numeric_limits<float>::quiet_NaN());
      pipe.generate(z.data(), n, images[k].data());
    }
    for (int k = 1; k < 3; ++k)
      CHECK_MESSAGE(std::memcmp(images[0].data(), images[k].data(), images[0].size() * 4) == 0,
                    spec_name(spec) << " " << a.name << ": Small and " << shapes[k] << " tiles differ on " << n << " images");
  }
  }
  if (before) setenv("FACEGEN_GPU_TILES", saved.c_str(), 1);
  else unsetenv("FACEGEN_GPU_TILES");
}

}  // namespace facegen
