// test_layers_cpu.cpp: the CPU layers and the CPU backend against float64 loops of the formulas.
//
// The references are written differently from the code under test (the transposed convolution as
// a scatter over input pixels and taps, everything in double), take fresh seeded random inputs,
// and every output starts as NaN so an element left unwritten fails. Sizes include odd ones
// (n = 1, 3; h = 1, 3, 4; c_in = 1, 7, 33; c_out = 1, 3, 5) and the network's own, one image.
// Results must also be bit-identical for any thread count and any batch split.
#include <doctest/doctest.h>

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
#include "common/cpu_isa.hpp"
#include "common/errors.hpp"
#include "generator/network.hpp"
#include "generator/reference_forward.hpp"
#include "kernels/cpu/layers_cpu.hpp"
#include "tests/layer_reference.hpp"

namespace facegen {
namespace {

using namespace facegen_test;

std::vector<double> tanh_ref(const std::vector<float>& in) {
  std::vector<double> out(in.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = std::tanh(double(in[i]));
  return out;
}

// ---- layer tests ----------------------------------------------------------------------------

TEST_CASE("projection_cpu matches a float64 loop") {
  std::mt19937_64 rng(101);
  const int shapes[][3] = {{1, 1, 1}, {3, 7, 5}, {3, 33, 1}, {1, 100, 8192}, {3, 100, 8192}};
  for (const auto& s : shapes) {
    const int n = s[0], k_in = s[1], k_out = s[2];
    const auto z = random_floats(rng, int64_t(n) * k_in, -1, 1);
    const auto weight = random_floats(rng, int64_t(k_in) * k_out, -1, 1);
    const auto bias = random_floats(rng, k_out, -1, 1);
    std::vector<float> out(int64_t(n) * k_out, kPoison);
    projection_cpu(z.data(), n, k_in, k_out, weight.data(), bias.data(), out.data(), 3);
    check_close(out, projection_ref(z, n, k_in, k_out, weight.data(), bias.data()), 1e-5, 1e-5,
                "projection n=" + std::to_string(n) + " k_in=" + std::to_string(k_in) +
                    " k_out=" + std::to_string(k_out));
  }
}

TEST_CASE("batchnorm_relu_cpu matches a float64 loop, in place too") {
  std::mt19937_64 rng(102);
  const int shapes[][2] = {{1, 1}, {7, 3}, {5, 33}, {16, 512}, {64, 256}, {256, 128}, {1024, 64}};
  for (const auto& s : shapes) {
    const int pixels = s[0], channels = s[1];
    const auto in = random_floats(rng, int64_t(pixels) * channels, -3, 3);
    const auto beta = random_floats(rng, channels, -1, 1);
    const auto gamma = random_floats(rng, channels, -2, 2);
    const auto mean = random_floats(rng, channels, -1, 1);
    const auto var = random_floats(rng, channels, 0.01f, 3);
    const auto ref = batchnorm_relu_ref(in, channels, beta.data(), gamma.data(), mean.data(),
                                        var.data());
    const std::string what = "batchnorm_relu " + std::to_string(pixels) + "x" +
                             std::to_string(channels);
    std::vector<float> out(in.size(), kPoison);
    batchnorm_relu_cpu(in.data(), pixels, channels, beta.data(), gamma.data(), mean.data(),
                       var.data(), out.data(), 2);
    check_close(out, ref, 1e-6, 1e-5, what);
    std::vector<float> inplace = in;
    batchnorm_relu_cpu(inplace.data(), pixels, channels, beta.data(), gamma.data(), mean.data(),
                       var.data(), inplace.data(), 2);
    check_identical(inplace, out, what + " in place");
  }
}

struct TConvCase {
  int n, h, w, c_in, c_out, k;
};

void check_tconv(std::mt19937_64& rng, const TConvCase& t, int threads) {
  // Weights scaled by the fan-in so outputs are O(1) and the tolerance means the same everywhere.
  const float scale = 1.0f / std::sqrt(float(t.c_in) * t.k * t.k / 4.0f);
  const auto in = random_floats(rng, int64_t(t.n) * t.h * t.w * t.c_in, -1, 1);
  const auto weight = random_floats(rng, int64_t(t.k) * t.k * t.c_out * t.c_in, -scale, scale);
  const auto bias = random_floats(rng, t.c_out, -0.5f, 0.5f);
  std::vector<float> out(int64_t(t.n) * 4 * t.h * t.w * t.c_out, kPoison);
  tconv_cpu(in.data(), t.n, t.h, t.w, t.c_in, t.k, weight.data(), bias.data(), t.c_out,
            out.data(), threads);
  std::ostringstream what;
  what << "tconv n=" << t.n << " h=" << t.h << " w=" << t.w << " c_in=" << t.c_in
       << " c_out=" << t.c_out << " k=" << t.k << " threads=" << threads;
  check_close(out,
              tconv_ref(in, t.n, t.h, t.w, t.c_in, t.k, weight.data(), bias.data(), t.c_out),
              1e-5, 1e-5, what.str());
}

TEST_CASE("tconv_cpu matches a float64 scatter loop on odd sizes, kernel sizes 5 and 4") {
  std::mt19937_64 rng(103);
  for (int k : {5, 4}) {
    for (int n : {1, 3})
      for (int h : {1, 3, 4})
        for (int c_in : {1, 7, 33})
          for (int c_out : {1, 3, 5}) check_tconv(rng, {n, h, h, c_in, c_out, k}, 2);
    // Non-square maps, and channel counts around the 8-channel blocks and lanes.
    check_tconv(rng, {3, 3, 1, 7, 5, k}, 2);
    check_tconv(rng, {1, 1, 4, 33, 3, k}, 3);
    check_tconv(rng, {3, 2, 5, 17, 9, k}, 2);
    check_tconv(rng, {2, 4, 4, 64, 16, k}, 1);
  }
}

TEST_CASE("tconv_cpu refuses a kernel size other than 4 or 5") {
  const std::vector<float> in(4, 1.0f), weight(9 * 4, 1.0f), bias(1, 0.0f);
  std::vector<float> out(16);
  CHECK_THROWS_AS(
      tconv_cpu(in.data(), 1, 2, 2, 1, 3, weight.data(), bias.data(), 1, out.data(), 1),
      std::invalid_argument);
}

TEST_CASE("tconv_cpu matches a float64 scatter loop at the network's sizes, one image") {
  std::mt19937_64 rng(104);
  for (int s = 0; s < kNumStages; ++s)
    check_tconv(
        rng, {1, kStageSize[s], kStageSize[s], kStageChannels[s], kStageChannels[s + 1], kTaps},
        2);
}

TEST_CASE("tanh_cpu matches std::tanh in double") {
  std::mt19937_64 rng(105);
  for (int count : {1, 3, 127, 12288}) {
    const auto in = random_floats(rng, count, -6, 6);
    std::vector<float> out(count, kPoison);
    tanh_cpu(in.data(), count, out.data(), 2);
    check_close(out, tanh_ref(in), 1e-6, 1e-6, "tanh count=" + std::to_string(count));
  }
}

TEST_CASE("CPU layers give identical bits for any thread count and batch split") {
  std::mt19937_64 rng(106);
  // A stage-1-like transposed convolution with a ragged last channel block.
  const int n = 5, h = 8, w = 8, c_in = 256, c_out = 13;
  const int64_t in_image = int64_t(h) * w * c_in, out_image = 4 * int64_t(h) * w * c_out;
  const auto in = random_floats(rng, n * in_image, -1, 1);
  const auto weight = random_floats(rng, 25 * int64_t(c_out) * c_in, -0.05f, 0.05f);
  const auto bias = random_floats(rng, c_out, -0.5f, 0.5f);
  auto run_tconv = [&](int threads) {
    std::vector<float> out(n * out_image, kPoison);
    tconv_cpu(in.data(), n, h, w, c_in, kTaps, weight.data(), bias.data(), c_out, out.data(),
              threads);
    return out;
  };
  const std::vector<float> base = run_tconv(1);
  for (int threads : {2, 3, 7}) check_identical(base, run_tconv(threads), "tconv threads");
  std::vector<float> one_by_one(n * out_image, kPoison);
  for (int img = 0; img < n; ++img)
    tconv_cpu(in.data() + img * in_image, 1, h, w, c_in, kTaps, weight.data(), bias.data(), c_out,
              one_by_one.data() + img * out_image, 2);
  check_identical(base, one_by_one, "tconv one image at a time");

  const int k_in = 100, k_out = 8192;
  const auto z = random_floats(rng, int64_t(n) * k_in, -1, 1);
  const auto pw = random_floats(rng, int64_t(k_in) * k_out, -0.1f, 0.1f);
  const auto pb = random_floats(rng, k_out, -0.1f, 0.1f);
  std::vector<float> proj1(int64_t(n) * k_out, kPoison), proj3 = proj1, proj_single = proj1;
  projection_cpu(z.data(), n, k_in, k_out, pw.data(), pb.data(), proj1.data(), 1);
  projection_cpu(z.data(), n, k_in, k_out, pw.data(), pb.data(), proj3.data(), 3);
  for (int img = 0; img < n; ++img)
    projection_cpu(z.data() + img * k_in, 1, k_in, k_out, pw.data(), pb.data(),
                   proj_single.data() + int64_t(img) * k_out, 2);
  check_identical(proj1, proj3, "projection threads");
  check_identical(proj1, proj_single, "projection one image at a time");
}

// ---- the CPU backend ------------------------------------------------------------------------

// Seeded random weights at scales that keep activations O(1), so tanh is not saturated; biases stay
// zero for a spec without them.
Network small_random_network(uint64_t seed, const ModelSpec& spec = kShpcSpec) {
  std::mt19937_64 rng(seed);
  Network net(spec);
  std::vector<float>& f = net.mutable_floats();
  auto fill = [&](int64_t offset, int64_t count, float lo, float hi) {
    std::uniform_real_distribution<float> dist(lo, hi);
    for (int64_t i = 0; i < count; ++i) f[offset + i] = dist(rng);
  };
  const int k = spec.kernel_size;
  const float proj_scale = std::sqrt(3.0f / spec.latent_dim);
  fill(net.proj_weight_offset(), int64_t(spec.latent_dim) * spec.proj_outputs(), -proj_scale, proj_scale);
  if (spec.has_bias) fill(net.proj_bias_offset(), spec.proj_outputs(), -0.1f, 0.1f);
  for (int s = 0; s < spec.stages(); ++s) {
    const int c = spec.stage_channels(s), c_out = spec.stage_channels(s + 1);
    const int64_t bn = net.batchnorm_offset(s);
    fill(bn, c, -0.2f, 0.2f);              // beta
    fill(bn + c, c, 0.7f, 1.3f);           // gamma
    fill(bn + 2 * c, c, -0.2f, 0.2f);      // mean
    fill(bn + 3 * c, c, 0.5f, 1.5f);       // var
    // About k^2 / 4 taps reach each output; ReLU keeps half the variance.
    const float scale = std::sqrt(4.0f / (c * k * k / 4.0f));
    fill(net.tconv_weight_offset(s), int64_t(k) * k * c_out * c, -scale, scale);
    if (spec.has_bias) fill(net.tconv_bias_offset(s), c_out, -0.1f, 0.1f);
  }
  return net;
}

// The whole forward pass for one latent (nz) in double -> image (size, size, nc).
std::vector<double> forward_ref(const Network& net, const float* latent) {
  const ModelSpec& spec = net.spec();
  std::vector<float> z(latent, latent + spec.latent_dim);
  std::vector<double> x = projection_ref(z, 1, spec.latent_dim, spec.proj_outputs(), net.proj_weight(),
                                         net.proj_bias());
  for (int s = 0; s < spec.stages(); ++s) {
    const BatchNormView bn = net.batchnorm(s);
    const TConvView tc = net.tconv(s);
    // The float64 references take float inputs; run them on the double values directly here.
    std::vector<double> y(int64_t(4) * tc.size_in * tc.size_in * tc.c_out);
    for (int64_t p = 0; p < int64_t(tc.size_in) * tc.size_in; ++p)
      for (int c = 0; c < tc.c_in; ++c) {
        double& v = x[p * tc.c_in + c];
        v = (v - bn.mean[c]) / std::sqrt(double(bn.var[c]) + 1e-5) * bn.gamma[c] + bn.beta[c];
        if (v < 0) v = 0;
      }
    const int h = tc.size_in, ow = 2 * h;
    for (int64_t p = 0; p < int64_t(ow) * ow; ++p)
      for (int k = 0; k < tc.c_out; ++k) y[p * tc.c_out + k] = tc.bias[k];
    for (int i = 0; i < h; ++i)
      for (int j = 0; j < h; ++j)
        for (int kh = 0; kh < tc.kernel_size; ++kh)
          for (int kw = 0; kw < tc.kernel_size; ++kw) {
            const int oy = 2 * i + kh - 1, ox = 2 * j + kw - 1;
            if (oy < 0 || oy >= ow || ox < 0 || ox >= ow) continue;
            for (int k = 0; k < tc.c_out; ++k) {
              const float* wt = tc.weight + ((int64_t(kh) * tc.kernel_size + kw) * tc.c_out + k) * tc.c_in;
              const double* xin = x.data() + (int64_t(i) * h + j) * tc.c_in;
              double s = 0;
              for (int c = 0; c < tc.c_in; ++c) s += xin[c] * wt[c];
              y[(int64_t(oy) * ow + ox) * tc.c_out + k] += s;
            }
          }
    x.swap(y);
  }
  for (double& v : x) v = std::tanh(v);
  return x;
}

TEST_CASE("CPU backend matches a float64 forward pass on a small random network") {
  const Network net = small_random_network(7);
  std::mt19937_64 rng(107);
  const int n = 3;
  const auto latents = random_floats(rng, int64_t(n) * kLatentDim, -1, 1);
  BackendOptions options;
  options.device = DeviceKind::Cpu;
  options.threads = 2;
  auto backend = make_cpu_backend(net, options);
  CHECK(backend->describe() == "CPU (" + cpu_isa_name(best_cpu_isa()) + "), 2 threads");
  std::vector<float> images(int64_t(n) * kImageValues, kPoison);
  backend->generate(latents.data(), n, images.data());
  for (int img : {0, 2}) {
    const std::vector<float> got(images.begin() + int64_t(img) * kImageValues,
                                 images.begin() + int64_t(img + 1) * kImageValues);
    const std::vector<double> ref = forward_ref(net, latents.data() + img * kLatentDim);
    check_close(got, ref, 2e-5, 1e-5, "CPU backend image " + std::to_string(img));
    // The images must be neither flat nor saturated, or the comparison proves little.
    double sum_sq = 0, largest = 0;
    for (double v : ref) {
      sum_sq += v * v;
      largest = std::max(largest, std::fabs(v));
    }
    const double rms = std::sqrt(sum_sq / ref.size());
    INFO("image rms " << rms << ", largest |value| " << largest);
    CHECK(rms > 0.05);
    CHECK(largest < 0.999);
  }
}

TEST_CASE("CPU backend gives identical bits for any thread count and batch split") {
  const Network net = small_random_network(8);
  std::mt19937_64 rng(108);
  const int n = 40;  // more than one internal chunk, with a ragged last one
  const auto latents = random_floats(rng, int64_t(n) * kLatentDim, -1, 1);
  // Images [0, count) from `threads` threads, `per_call` latents per generate() call.
  auto generate = [&](int threads, int per_call, int count) {
    BackendOptions options;
    options.device = DeviceKind::Cpu;
    options.threads = threads;
    auto backend = make_cpu_backend(net, options);
    std::vector<float> images(int64_t(count) * kImageValues, kPoison);
    for (int first = 0; first < count; first += per_call) {
      backend->generate(latents.data() + int64_t(first) * kLatentDim,
                        std::min(per_call, count - first),
                        images.data() + int64_t(first) * kImageValues);
    }
    return images;
  };
  const std::vector<float> base = generate(2, n, n);
  check_identical(base, generate(1, n, n), "1 thread vs 2");
  check_identical(base, generate(3, 7, n), "3 threads, 7 images per call vs 2 threads, all at once");
  const int few = 3;
  check_identical(std::vector<float>(base.begin(), base.begin() + few * kImageValues),
                  generate(2, 1, few), "one image per call");
}

TEST_CASE("CPU backend and the reference forward pass run any ModelSpec, against a float64 forward pass") {
  // nz, ngf, nc, k, biases, image size: the PyTorch tutorial's generator and odd neighbours of it, at
  // every image size (the 32x32 networks' last layer is narrower than an AVX-512 step, which the
  // packing takes into account).
  const ModelSpec specs[] = {{100, 16, 3, 4, false}, {7, 16, 1, 4, false},       {128, 32, 1, 5, true},
                             {1, 16, 3, 5, false},   {100, 16, 1, 4, true},       {100, 48, 3, 4, false, 32},
                             {13, 16, 1, 5, true, 32}, {100, 16, 3, 4, false, 128}, {9, 16, 1, 5, true, 128}};
  uint64_t seed = 30;
  for (const ModelSpec& spec : specs) {
    INFO(describe_spec(spec));
    const Network net = small_random_network(++seed, spec);
    std::mt19937_64 rng(seed);
    const int n = 3;
    const auto latents = random_floats(rng, int64_t(n) * spec.latent_dim, -1, 1);
    BackendOptions options;
    options.device = DeviceKind::Cpu;
    options.threads = 2;
    auto backend = make_cpu_backend(net, options);
    const int values = spec.image_values();
    std::vector<float> fast(int64_t(n) * values, kPoison), reference = fast;
    backend->generate(latents.data(), n, fast.data());
    REQUIRE(reference_forward(net, latents.data(), n, reference.data(), 2));
    for (int img = 0; img < n; ++img) {
      const std::vector<double> ref = forward_ref(net, latents.data() + img * spec.latent_dim);
      for (const std::vector<float>* images : {&fast, &reference}) {
        const std::vector<float> got(images->begin() + int64_t(img) * values,
                                     images->begin() + int64_t(img + 1) * values);
        check_close(got, ref, 2e-5, 1e-5,
                    std::string(images == &fast ? "CPU backend" : "reference_forward") + " image " + std::to_string(img));
      }
      double sum_sq = 0;
      for (double v : ref) sum_sq += v * v;
      CHECK(std::sqrt(sum_sq / ref.size()) > 0.05);  // not flat: the comparison means something
    }
  }
}

TEST_CASE("reference_forward shows each layer to its observer, in order, and stops where told") {
  const Network net = small_random_network(40, ModelSpec{5, 16, 1, 4, false});
  std::mt19937_64 rng(41);
  const auto latents = random_floats(rng, 2 * 5, -1, 1);
  std::vector<std::string> seen;
  std::vector<float> images(2 * 4096, kPoison);
  CHECK(reference_forward(net, latents.data(), 2, images.data(), 1, [&](const std::string& layer, const std::vector<float>& v) {
    seen.push_back(layer + ":" + std::to_string(v.size()));
    return true;
  }));
  // Two images: (4, 4, 128), (8, 8, 64), (16, 16, 32), (32, 32, 16), (64, 64, 1) each.
  CHECK(seen == std::vector<std::string>{"proj:4096", "bn0:4096", "tconv1:8192", "bn1:8192", "tconv2:16384",
                                         "bn2:16384", "tconv3:32768", "bn3:32768", "tconv4:8192", "tanh:8192"});
  std::vector<float> untouched(2 * 4096, kPoison);
  CHECK_FALSE(reference_forward(net, latents.data(), 2, untouched.data(), 1,
                                [&](const std::string& layer, const std::vector<float>&) { return layer != "bn2"; }));
  CHECK(std::isnan(untouched[0]));
}

TEST_CASE("make_backend: cpu on request, and without a GPU auto falls back while cuda is refused") {
  const Network net;  // zeros are enough to build backends
  BackendOptions options;
  options.device = DeviceKind::Cpu;
  options.threads = 3;
  const std::string cpu3 = "CPU (" + cpu_isa_name(best_cpu_isa()) + "), 3 threads";
  std::string notice = "unchanged";
  CHECK(make_backend(net, options, &notice)->describe() == cpu3);
  CHECK(notice.empty());

  std::string reason;
  if (usable_gpu_count(&reason) > 0) return;  // the GPU tests cover machines with one
  CHECK(!reason.empty());
  // The runtime's jargon is translated: no "CUDA driver version is insufficient ..." reaches a user.
  CHECK(reason.find("insufficient") == std::string::npos);
  options.device = DeviceKind::Auto;
  CHECK(make_backend(net, options, &notice)->describe() == cpu3);
  CHECK(notice == "no NVIDIA GPU is usable here (" + reason + "); running on the CPU with 3 threads");
  options.device = DeviceKind::Cuda;
  const std::string expected = "--device cuda: no NVIDIA GPU is usable here (" + reason + ")";
  CHECK_THROWS_WITH_AS(make_backend(net, options, &notice), expected.c_str(), std::runtime_error);
  bool user_error = false;
  try {
    make_backend(net, options, &notice);
  } catch (const UserError&) {
    user_error = true;  // would be exit status 1; no usable GPU is the environment's fault (3)
  } catch (const std::exception&) {
  }
  CHECK(!user_error);
}

}  // namespace
}  // namespace facegen
