// test_any_shape_gpu.cu: DeviceNetwork (kernels/generator_gpu.hpp) on networks of every shape of the
// family: the any-shape kernels of every layer, the fixed-shape ones where a layer has their shape,
// against the float64 reference (tests/gpu/reference.hpp) and against each other.
//
// Specs that between them take kernel size 4 and 5, base_channels 16, 32, 64, 128 (and 256 at two
// images), nz 1, 100, 128, 1024, nc 1 and 3, with and without biases; a spec with a layer of the
// fixed-shape kernels' shape runs its layers twice, as chosen and with every layer on the any-shape
// kernels. Fresh random weights and inputs each run (seed printed; FACEGEN_TEST_SEED repeats one),
// outputs poisoned with NaN, batch sizes 1, 3 and 127 for the layers and up to 1000 for the pipeline
// (FACEGEN_GPU_TEST_MAX_BATCH caps them). Each layer's input values are exact in bfloat16, so one
// float64 reference serves all three precisions; fp32 runs in both its kernels (tensor cores, FFMA). The pipeline's tf32 and bf16 tolerance widens for a
// network whose images the precision's rounding moves further (emulated_rounding_error), so that no
// random draw fails a correct kernel.
#include <doctest/doctest.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cuda_check.cuh"
#include "common/model_spec.hpp"
#include "generator/gpu_pipeline.hpp"
#include "kernels/generator_gpu.hpp"
#include "kernels/weight_folding.hpp"
#include "tests/gpu/gpu_test_support.cuh"
#include "tests/gpu/reference.hpp"

namespace facegen {
namespace {

// {nz, base_channels, nc, kernel size, biases}
const ModelSpec kSpecs[] = {
    {1, 16, 1, 4, false},  {100, 32, 3, 5, true},  {128, 64, 3, 4, false}, {1024, 128, 1, 5, true},
    {100, 64, 1, 4, false}, {128, 16, 3, 5, true}, {1024, 32, 3, 4, true},  {1, 128, 3, 4, false},
};
const ModelSpec kWidest{100, 256, 3, 5, false};  // layers only, at 1 and 3 images (its reference is slow)
// {nz, base_channels, nc, kernel size, biases, image size}: the other image sizes, with widths that
// meet the fixed-shape kernels' layers (32x32 of ngf 128, 128x128 of ngf 32) and widths that do not.
const ModelSpec kSizeSpecs[] = {
    {37, 48, 1, 5, true, 32}, {100, 128, 3, 4, false, 32}, {100, 32, 3, 4, false, 128}, {64, 16, 1, 5, true, 128},
};

std::string describe(const ModelSpec& s) {
  return "nz " + std::to_string(s.latent_dim) + " g " + std::to_string(s.base_channels) + " nc " +
         std::to_string(s.image_channels) + " k " + std::to_string(s.kernel_size) + (s.has_bias ? " bias" : "") +
         " " + std::to_string(s.image_size) + "px";
}

std::vector<int> layer_batch_sizes(int cap) {
  std::vector<int> out;
  for (int n : batch_sizes())
    if (n <= cap) out.push_back(n);
  return out;
}

// Device copy of values (exact in bfloat16) in precision p's storage type.
struct DeviceActivations {
  DeviceBuffer buf;
  DeviceActivations(const std::vector<float>& values, Precision p) : buf(values.size() * (p == Precision::Bf16 ? 2 : 4)) {
    std::vector<unsigned char> bytes(buf.bytes);
    for (size_t i = 0; i < values.size(); ++i) {
      if (p == Precision::Bf16) {
        const __nv_bfloat16 b = __float2bfloat16_rn(values[i]);
        std::memcpy(&bytes[2 * i], &b, 2);
      } else {
        std::memcpy(&bytes[4 * i], &values[i], 4);
      }
    }
    CUDA_CHECK(cudaMemcpy(buf.p, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
  }
};

std::vector<float> bf16_exact_values(size_t count, std::mt19937_64& rng) {
  std::vector<float> v(count);
  std::uniform_real_distribution<float> u(0.f, 1.5f);
  for (auto& x : v) x = __bfloat162float(__float2bfloat16_rn(u(rng)));
  return v;
}

std::vector<float> download(const DeviceBuffer& b, Precision p) {
  std::vector<unsigned char> bytes(b.bytes);
  CUDA_CHECK(cudaMemcpy(bytes.data(), b.p, bytes.size(), cudaMemcpyDeviceToHost));
  return to_floats(bytes, p);
}

// Every layer of one spec, each arithmetic (kArithmetics), batch sizes up to cap; any_shape: every layer
// on the any-shape kernels, else each on the kernels its shape picks.
void check_layers_on(const ModelSpec& spec, int cap, uint64_t seed, bool any_shape) {
  std::mt19937_64 rng(seed + 1);
  const auto net = reference::random_network(seed, spec);
  const reference::Offsets o(spec);
  const int nz = spec.latent_dim, k = spec.kernel_size;
  std::vector<std::unique_ptr<DeviceNetwork>> dn;
  for (const Arithmetic& a : kArithmetics) {
    const Fp32KernelScope fp32_kernel(a.fp32_kernel);
    dn.push_back(std::make_unique<DeviceNetwork>(net.data(), spec, a.precision));
    dn.back()->use_any_shape_kernels(any_shape);
  }
  for (int n : layer_batch_sizes(cap)) {
    const std::string at = describe(spec) + (any_shape ? " any-shape" : "") + " n=" + std::to_string(n);
    {  // projection + bn0 + relu
      std::vector<float> z(size_t(n) * nz);
      std::normal_distribution<float> nd;
      for (auto& v : z) v = nd(rng);
      DeviceBuffer dz(z.size() * 4);
      CUDA_CHECK(cudaMemcpy(dz.p, z.data(), dz.bytes, cudaMemcpyHostToDevice));
      const int k_out = spec.proj_outputs();
      const auto ref = reference_images(sampled_images(n), [&](int img) {
        std::vector<double> x(k_out);
        for (int j = 0; j < k_out; ++j) {
          double s = net[o.proj_bias + j];
          for (int c = 0; c < nz; ++c) s += double(z[size_t(img) * nz + c]) * net[o.proj_weight + int64_t{c} * k_out + j];
          x[j] = s;
        }
        reference::bn_relu(x, &net[o.bn[0]], spec.stage_channels(0));
        return x;
      });
      for (size_t i = 0; i < dn.size(); ++i) {
        const Precision p = kArithmetics[i].precision;
        DeviceBuffer out(dn[i]->activation_bytes_per_image(0) * n);
        out.poison();
        dn[i]->projection(static_cast<const float*>(dz.p), n, out.p, nullptr);
        check(download(out, p), n, k_out, ref, layer_tolerance(p), std::string("projection ") + kArithmetics[i].name + " " + at);
      }
    }
    const int last = spec.stages() - 1;  // the last tconv's stage
    for (int stage = 0; stage < last; ++stage) {  // tconv + bn + relu
      const int h = ModelSpec::stage_size(stage), c_in = spec.stage_channels(stage), c_out = spec.stage_channels(stage + 1);
      const size_t in_per = size_t(h) * h * c_in, out_per = size_t(4) * h * h * c_out;
      const auto in = bf16_exact_values(in_per * n, rng);
      const auto ref = reference_images(sampled_images(n), [&](int img) {
        std::vector<double> x(in.begin() + img * in_per, in.begin() + (img + 1) * in_per);
        auto y = reference::tconv(x, h, c_in, &net[o.tconv_weight[stage]], &net[o.tconv_bias[stage]], c_out, k);
        reference::bn_relu(y, &net[o.bn[stage + 1]], c_out);
        return y;
      });
      for (size_t i = 0; i < dn.size(); ++i) {
        const Precision p = kArithmetics[i].precision;
        DeviceActivations din(in, p);
        DeviceBuffer out(dn[i]->activation_bytes_per_image(stage + 1) * n);
        out.poison();
        dn[i]->tconv(stage, din.buf.p, n, out.p, nullptr);
        check(download(out, p), n, out_per, ref, layer_tolerance(p),
              "tconv stage " + std::to_string(stage) + " " + kArithmetics[i].name + " " + at);
      }
    }
    {  // last tconv + bias + tanh
      const int c_in = spec.stage_channels(last), nc = spec.image_channels, h = ModelSpec::stage_size(last);
      const size_t in_per = size_t(h) * h * c_in, out_per = size_t(spec.image_values());
      const auto in = bf16_exact_values(in_per * n, rng);
      const auto ref = reference_images(sampled_images(n), [&](int img) {
        std::vector<double> x(in.begin() + img * in_per, in.begin() + (img + 1) * in_per);
        auto y = reference::tconv(x, h, c_in, &net[o.tconv_weight[last]], &net[o.tconv_bias[last]], nc, k);
        for (double& v : y) v = std::tanh(v);
        return y;
      });
      for (size_t i = 0; i < dn.size(); ++i) {
        const Precision p = kArithmetics[i].precision;
        DeviceActivations din(in, p);
        DeviceBuffer out(out_per * n * 4);
        out.poison();
        dn[i]->output_layer(din.buf.p, n, static_cast<float*>(out.p), nullptr);
        // float32 FFMA: 1e-5. The fixed-shape bf16 tconv4 on tensor cores keeps each weight as two
        // bf16 terms (within 2^-18 of itself): its exact bound, 1e-5 + 2^-17 of each output's sum of
        // |products|, is checked in test_generator_gpu.cu; here, with sums of |products| up to about
        // 5, 1e-4.
        const bool bf16_terms = p == Precision::Bf16 && dn[i]->fixed_shape(last + 1) && dn[i]->output_mma();
        check(download(out, Precision::Fp32), n, out_per, ref, Tolerance{bf16_terms ? 1e-4 : 1e-5, 0},
              std::string("output layer ") + kArithmetics[i].name + " " + at);
      }
    }
  }
}

// fp32's image tolerance for a spec: 1e-5 for sums of up to 4,608 products (the SHPC network's
// longest, tconv1's 9 taps x 512 channels), growing as the square root of the longest sum beyond it
// (float32 rounding errors add up as a random walk): nz 1024 with ngf 128 and 5x5 kernels sums 9,216
// products in tconv1, and one draw's worst image value was 1.0e-5 off (2026-11-25).
double fp32_image_tolerance(const ModelSpec& spec) {
  const double taps = (spec.kernel_size + 1) / 2 * ((spec.kernel_size + 1) / 2);
  const double longest = std::max<double>(spec.latent_dim, taps * spec.stage_channels(0));
  return 1e-5 * std::sqrt(std::max(1.0, longest / 4608));
}

// The layers as chosen, and again on the any-shape kernels where the spec has a fixed-shape layer.
void check_layers(const ModelSpec& spec, int cap, uint64_t seed) {
  check_layers_on(spec, cap, seed, false);
  const auto net = reference::random_network(seed, spec);
  const DeviceNetwork dn(net.data(), spec, Precision::Fp32);
  bool some_fixed = false;
  for (int l = 0; l < dn.layers(); ++l) some_fixed = some_fixed || dn.fixed_shape(l);
  if (some_fixed) check_layers_on(spec, cap, seed, true);
}

std::vector<float> random_latents(size_t count, std::mt19937_64& rng) {
  std::normal_distribution<float> nd;
  std::vector<float> z(count);
  for (auto& v : z) v = nd(rng);
  return z;
}

}  // namespace

TEST_CASE("every layer matches the float64 reference for kernel size 4 and 5, every width, nz and nc") {
  uint64_t seed = test_seed() + 100;
  for (const ModelSpec& spec : kSpecs) check_layers(spec, 127, seed += 10);
  check_layers(kWidest, 3, seed + 10);
}

TEST_CASE("any-shape kernels in every tile shape, k 4 and 5, at a few images (the racecheck case)") {
  // Width 16 gives tconv outputs of 64, 32 and 16 channels: each N tile (tconv_any.cuh) runs, in
  // each precision; tests/sanitize_gpu.sh runs this case under racecheck.
  const uint64_t seed = test_seed() + 150;
  check_layers(ModelSpec{1, 16, 1, 4, false}, 3, seed);
  check_layers(ModelSpec{128, 16, 3, 5, true}, 3, seed + 10);
}

namespace {

// A pipeline of `spec` against float64 in every arithmetic, at n_max images and at every smaller batch
// size (the same bits), and again in batches of 127 (both device slots, the graphs).
void check_pipeline(const ModelSpec& spec, int n_max, uint64_t seed) {
  const auto net = reference::random_network(seed, spec);
  std::mt19937_64 rng(seed + 1);
  const auto z = random_latents(size_t(n_max) * spec.latent_dim, rng);
  const size_t per_image = spec.image_values();
  const auto ref = reference_images(sampled_images(n_max), [&](int img) {
    return reference::forward(net, &z[size_t(img) * spec.latent_dim], spec);
  });
  for (const Arithmetic& a : kArithmetics) {
    const Precision p = a.precision;
    const Fp32KernelScope fp32_kernel(a.fp32_kernel);
    const std::string what = std::string("pipeline ") + a.name + " " + describe(spec);
    const double emulated = emulated_rounding_error(net, spec, p, sampled_images(n_max), z, ref);
    const double usual = p == Precision::Fp32 ? fp32_image_tolerance(spec) : image_tolerance(p).atol;
    const Tolerance tol{std::max(usual, 2 * emulated), 0};
    GpuPipeline pipe(net.data(), spec, p, n_max, 0);
    std::vector<float> all(size_t(n_max) * per_image, std::numeric_limits<float>::quiet_NaN());
    pipe.generate(z.data(), n_max, all.data());
    const double worst = check(all, n_max, per_image, ref, tol, what);
    if (p != Precision::Fp32)
      MESSAGE(what << ": worst error " << worst << ", the emulated rounding's " << emulated << ", tolerance " << tol.atol);
    for (int n : batch_sizes()) {
      if (n >= n_max) continue;
      std::vector<float> part(size_t(n) * per_image, std::numeric_limits<float>::quiet_NaN());
      pipe.generate(z.data(), n, part.data());
      CHECK_MESSAGE(std::memcmp(part.data(), all.data(), part.size() * 4) == 0,
                    what << ": images of a batch of " << n << " differ from the same images in a batch of " << n_max);
    }
    // Several batches per call (a partial last one), through both device slots and the graphs.
    GpuPipeline small(net.data(), spec, p, std::min(127, n_max), 0);
    std::vector<float> again(all.size(), std::numeric_limits<float>::quiet_NaN());
    small.generate(z.data(), n_max, again.data());
    CHECK_MESSAGE(std::memcmp(again.data(), all.data(), all.size() * 4) == 0,
                  what << ": " << n_max << " images in batches of " << small.max_batch() << " differ from one batch");
  }
}

}  // namespace

TEST_CASE("pipeline images of every shape match the float64 reference and do not depend on the batch size") {
  const int n_max = std::min(1000, batch_sizes().back());
  uint64_t seed = test_seed() + 200;
  for (const ModelSpec& spec : {kSpecs[0], kSpecs[2], kSpecs[3], kSpecs[6]}) check_pipeline(spec, n_max, seed += 10);
}

TEST_CASE("32x32 and 128x128 networks: every layer and the pipeline's images match the float64 reference") {
  uint64_t seed = test_seed() + 250;
  for (const ModelSpec& spec : kSizeSpecs) check_layers(spec, 127, seed += 10);
  const int n_max = std::min(300, batch_sizes().back());
  for (const ModelSpec& spec : kSizeSpecs) check_pipeline(spec, n_max, seed += 10);
}

TEST_CASE("the any-shape kernels agree with the fixed-shape ones on the networks of the fixed shape") {
  for (const ModelSpec& spec : {kShpcSpec, kTutorialSpec}) {
  const auto net = reference::random_network(test_seed() + 300, spec);
  const int n = std::min(127, batch_sizes().back());
  std::mt19937_64 rng(test_seed() + 301);
  const auto z = random_latents(size_t(n) * spec.latent_dim, rng);
  DeviceBuffer dz(z.size() * 4);
  CUDA_CHECK(cudaMemcpy(dz.p, z.data(), dz.bytes, cudaMemcpyHostToDevice));
  for (const Arithmetic& a : kArithmetics) {
    const Precision p = a.precision;
    const Fp32KernelScope fp32_kernel(a.fp32_kernel);
    DeviceNetwork fixed(net.data(), spec, p);
    DeviceNetwork any(net.data(), spec, p);
    any.use_any_shape_kernels(true);
    std::vector<float> images[2];
    for (int k = 0; k < 2; ++k) {
      std::vector<std::unique_ptr<DeviceBuffer>> act;
      void* a[kMaxStages] = {};
      for (int s = 0; s < spec.stages(); ++s) {
        act.push_back(std::make_unique<DeviceBuffer>(fixed.activation_bytes_per_image(s) * n));
        a[s] = act.back()->p;
      }
      DeviceBuffer out(size_t(n) * spec.image_values() * 4);
      out.poison();
      if (k == 0) fixed.forward(static_cast<const float*>(dz.p), n, a, static_cast<float*>(out.p), nullptr);
      else any.forward(static_cast<const float*>(dz.p), n, a, static_cast<float*>(out.p), nullptr);
      images[k] = download(out, Precision::Fp32);
    }
    // Each is within image_tolerance of float64, so within twice that of each other.
    const Tolerance tol = image_tolerance(p);
    size_t bad = 0, not_finite = 0;
    double worst = 0;
    for (size_t i = 0; i < images[0].size(); ++i) {
      not_finite += !std::isfinite(images[1][i]);
      const double d = std::fabs(double(images[1][i]) - images[0][i]);
      worst = std::max(worst, d);
      if (!(d <= 2 * tol.atol) && bad++ < 5)
        FAIL_CHECK(describe(spec) << " " << a.name << " index " << i << ": any-shape " << images[1][i] << ", fixed-shape " << images[0][i]);
    }
    CHECK_MESSAGE(not_finite == 0, a.name << ": " << not_finite << " any-shape outputs not written");
    MESSAGE(describe(spec) << ", " << a.name << ", any-shape vs fixed-shape kernels over " << n << " images: worst abs difference " << worst);
  }
  }
}

TEST_CASE("fp32 on tensor cores is as exact as FFMA against float64 on the any-shape kernels") {
  // Two widths the fixed-shape kernels do not have, 8 images each (layer_errors.hpp; the projection and
  // the last layer run FFMA on both, as for tf32).
  const int n = 8;
  uint64_t seed = test_seed() + 400;
  for (const ModelSpec& spec : {ModelSpec{37, 48, 1, 5, true}, ModelSpec{100, 32, 3, 4, false}}) {
    std::mt19937_64 rng(seed + 1);
    const auto z = random_latents(size_t(n) * spec.latent_dim, rng);
    check_fp32_tensor_cores_as_exact(reference::random_network(seed += 10, spec), spec, z, n, fp32_image_tolerance(spec),
                                     describe(spec));
  }
}

TEST_CASE("the GPU refuses a network outside the family's range in one sentence") {
  CHECK(model_spec_problem(ModelSpec{100, 64, 3, 4, false}).empty());
  CHECK(model_spec_problem(ModelSpec{1024, 256, 1, 5, true}).empty());
  for (const ModelSpec& bad : {ModelSpec{0, 64, 3, 4, false}, ModelSpec{1025, 64, 3, 4, false},
                               ModelSpec{100, 8, 3, 4, false}, ModelSpec{100, 40, 3, 4, false},
                               ModelSpec{100, 272, 3, 4, false}, ModelSpec{100, 64, 2, 4, false},
                               ModelSpec{100, 64, 3, 3, false}}) {
    const std::string why = model_spec_problem(bad);
    CHECK_MESSAGE(!why.empty(), describe(bad) << " was accepted");
    CHECK(why.find('\n') == std::string::npos);
    const std::vector<float> floats(1, 0.f);  // never read: the spec is refused first
    CHECK_THROWS_AS(DeviceNetwork(floats.data(), bad, Precision::Fp32), std::invalid_argument);
  }
}

}  // namespace facegen
