// test_phase_gemm_cpu.cpp: the fast CPU layers (kernels/cpu/phase_gemm_cpu.hpp) against float64 loops
// of the formulas (tests/layer_reference.hpp), with every instruction set this CPU has.
//
// Each layer gets fresh seeded random weights, batch norms and inputs for networks of the family
// (common/model_spec.hpp): kernel sizes 5 and 4, channel widths g * {8, 4, 2, 1} for several g
// (16 and 48 need half panels with AVX-512), 1 and 3 image channels, zero biases too, latent sizes
// 1 to 1024; odd batches; outputs poisoned with NaN and a zero border that must stay zero. The
// first image computed alone on one thread must give the bits it gets inside a batch on three.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cpu_isa.hpp"
#include "common/errors.hpp"
#include "common/model_shape.hpp"
#include "common/threads.hpp"
#include "kernels/cpu/phase_gemm_cpu.hpp"
#include "tests/layer_reference.hpp"

namespace facegen {
namespace {

using namespace facegen_test;

std::vector<CpuIsa> supported_isas() {
  std::vector<CpuIsa> isas;
  for (CpuIsa isa : {CpuIsa::Avx512, CpuIsa::Avx2, CpuIsa::Sse2})
    if (cpu_supports(isa)) isas.push_back(isa);
  return isas;
}

// Batch norm then ReLU in double, in place; x (pixels, channels).
void batchnorm_relu_in_place(std::vector<double>& x, const BatchNormView& bn) {
  for (size_t i = 0; i < x.size(); ++i) {
    const int c = static_cast<int>(i % bn.channels);
    const double v =
        (x[i] - bn.mean[c]) / std::sqrt(double(bn.var[c]) + 1e-5) * bn.gamma[c] + bn.beta[c];
    x[i] = v > 0 ? v : 0;
  }
}

// Index of pixel (y, x), channel c of image `img` in a padded map (n, h + 2, h + 2, c), or a
// channel-planar one (n, h + 2, c, h + 2).
int64_t padded_index(int img, int h, int channels, int y, int x, int c, bool planar) {
  const int64_t base = img * padded_floats(h, channels) + int64_t(y + 1) * (h + 2) * channels;
  return base + (planar ? int64_t(c) * (h + 2) + x + 1 : int64_t(x + 1) * channels + c);
}

// x (n, h, h, c) -> a padded map with a zero border.
std::vector<float> to_padded(const std::vector<float>& x, int n, int h, int channels, bool planar) {
  std::vector<float> out(n * padded_floats(h, channels), 0.0f);
  for (int img = 0; img < n; ++img)
    for (int y = 0; y < h; ++y)
      for (int xx = 0; xx < h; ++xx)
        for (int c = 0; c < channels; ++c)
          out[padded_index(img, h, channels, y, xx, c, planar)] =
              x[((int64_t(img) * h + y) * h + xx) * channels + c];
  return out;
}

// A padded map for a layer to write: NaN inside, zeros on the border.
std::vector<float> poisoned_padded(int n, int h, int channels, bool planar) {
  return to_padded(std::vector<float>(int64_t(n) * h * h * channels, kPoison), n, h, channels,
                   planar);
}

// The inside of a padded map as (n, h, h, c); fails the test if the border is not all zeros.
std::vector<float> from_padded(const std::vector<float>& map, int n, int h, int channels,
                               bool planar) {
  std::vector<float> x(int64_t(n) * h * h * channels);
  std::vector<char> inside(map.size(), 0);
  for (int img = 0; img < n; ++img)
    for (int y = 0; y < h; ++y)
      for (int xx = 0; xx < h; ++xx)
        for (int c = 0; c < channels; ++c) {
          const int64_t at = padded_index(img, h, channels, y, xx, c, planar);
          x[((int64_t(img) * h + y) * h + xx) * channels + c] = map[at];
          inside[at] = 1;
        }
  int64_t border_written = 0;
  for (size_t i = 0; i < map.size(); ++i) border_written += !inside[i] && map[i] != 0.0f;
  CHECK(border_written == 0);
  return x;
}

// Random inference batch-norm parameters of `channels`, kept alive in `store`.
BatchNormView random_batchnorm(std::mt19937_64& rng, int channels,
                               std::vector<std::vector<float>>& store) {
  store.push_back(random_floats(rng, channels, -0.2f, 0.2f));  // beta
  store.push_back(random_floats(rng, channels, 0.7f, 1.3f));   // gamma
  store.push_back(random_floats(rng, channels, -0.2f, 0.2f));  // mean
  store.push_back(random_floats(rng, channels, 0.5f, 1.5f));   // var
  const size_t last = store.size();
  return {store[last - 4].data(), store[last - 3].data(), store[last - 2].data(),
          store[last - 1].data(), channels};
}

TEST_CASE("fast projection matches a float64 loop for nz 1 to 1024, every instruction set") {
  std::mt19937_64 rng(121);
  struct Case {
    int n, nz, channels;  // channels = 8g of the (4, 4, 8g) output
  };
  // n = 13: a full AVX-512 tile of 12 rows and one more.
  for (const Case& t : {Case{1, 100, 512}, Case{13, 100, 128}, Case{3, 1, 384}, Case{2, 1024, 128},
                        Case{5, 7, 2048}}) {
    const int k_out = 16 * t.channels;
    std::vector<std::vector<float>> store;
    const float scale = std::sqrt(3.0f / t.nz);
    const auto z = random_floats(rng, int64_t(t.n) * t.nz, -2, 2);
    const auto weight = random_floats(rng, int64_t(t.nz) * k_out, -scale, scale);
    const auto bias = random_floats(rng, k_out, -0.1f, 0.1f);
    const BatchNormView bn = random_batchnorm(rng, t.channels, store);
    std::vector<double> ref = projection_ref(z, t.n, t.nz, k_out, weight.data(), bias.data());
    batchnorm_relu_in_place(ref, bn);
    for (CpuIsa isa : supported_isas()) {
      const PackedLayer layer = pack_projection(weight.data(), bias.data(), t.nz, bn, isa);
      std::vector<float> out = poisoned_padded(t.n, 4, t.channels, false);
      ThreadShare pool(2);
      projection_relu_fast(layer, z.data(), t.n, out.data(), pool);
      check_close(from_padded(out, t.n, 4, t.channels, false), ref, 1e-5, 1e-5,
                  "projection, " + cpu_isa_name(isa) + ", n = " + std::to_string(t.n) +
                      ", nz = " + std::to_string(t.nz) + ", " + std::to_string(t.channels) +
                      " channels");
    }
  }
}

struct FastCase {
  int n, h, c_in, c_out, k;
  bool last;        // tanh after it, else batch norm + ReLU
  bool planar_out;  // a ReLU layer writing the channel-planar map the last layer reads
  bool zero_bias;   // a model without biases
};

// One transposed-convolution layer of the fast path on t.n random images: against float64, and
// image 0 alone on one thread against the same image in the batch on three threads.
void check_fast_tconv(const FastCase& t, std::mt19937_64& rng) {
  const int h = t.h, oh = 2 * h;
  std::vector<std::vector<float>> store;
  // About k * k / 4 taps reach each output; ReLU keeps half the variance.
  const float scale = std::sqrt(8.0f / (t.c_in * t.k * t.k));
  const auto weight = random_floats(rng, int64_t(t.k) * t.k * t.c_out * t.c_in, -scale, scale);
  const auto bias = t.zero_bias ? std::vector<float>(t.c_out, 0.0f)
                                : random_floats(rng, t.c_out, -0.1f, 0.1f);
  const TConvView tc{weight.data(), bias.data(), t.c_in, t.c_out, h, t.k};
  const auto x = random_floats(rng, int64_t(t.n) * h * h * t.c_in, -1, 1);
  std::vector<double> ref = tconv_ref(x, t.n, h, h, t.c_in, t.k, tc.weight, tc.bias, t.c_out);
  const BatchNormView next_bn = t.last ? BatchNormView{} : random_batchnorm(rng, t.c_out, store);
  if (t.last) {
    for (double& v : ref) v = std::tanh(v);
  } else {
    batchnorm_relu_in_place(ref, next_bn);
  }
  const std::vector<float> in = to_padded(x, t.n, h, t.c_in, t.last);
  for (CpuIsa isa : supported_isas()) {
    const std::string what = "k = " + std::to_string(t.k) + ", " + std::to_string(t.c_in) +
                             " -> " + std::to_string(t.c_out) + " channels at " +
                             std::to_string(h) + "x" + std::to_string(h) + ", " +
                             cpu_isa_name(isa) + (t.planar_out ? ", channel-planar output" : "") +
                             (t.zero_bias ? ", zero bias" : "");
    const PackedLayer layer = pack_tconv(tc, t.last ? nullptr : &next_bn, isa);
    auto run = [&](int images, int threads) {
      ThreadShare pool(threads);
      const int64_t image_floats = int64_t(oh) * oh * t.c_out;
      std::vector<float> out = t.last ? std::vector<float>(images * image_floats, kPoison)
                                      : poisoned_padded(images, oh, t.c_out, t.planar_out);
      if (t.last)
        tconv_tanh_fast(layer, in.data(), images, out.data(), pool);
      else
        tconv_relu_fast(layer, in.data(), images, out.data(), t.planar_out, pool);
      return t.last ? out : from_padded(out, images, oh, t.c_out, t.planar_out);
    };
    const std::vector<float> got = run(t.n, 3);
    check_close(got, ref, 1e-5, 1e-5, what);
    const std::vector<float> alone = run(1, 1);
    check_identical(alone, std::vector<float>(got.begin(), got.begin() + alone.size()),
                    what + ": image 0 alone on 1 thread vs in a batch on 3");
  }
}

// The four layers of a network with g = base channels, at the family's sizes, n images each.
void check_fast_network_layers(int g, int nc, int k, int n, std::mt19937_64& rng) {
  INFO("g = " << g << ", nc = " << nc << ", k = " << k);
  check_fast_tconv({n, 4, 8 * g, 4 * g, k, false, false, false}, rng);
  check_fast_tconv({n, 8, 4 * g, 2 * g, k, false, false, true}, rng);
  check_fast_tconv({n, 16, 2 * g, g, k, false, true, false}, rng);  // the layout the last reads
  check_fast_tconv({n, 32, g, nc, k, true, false, false}, rng);
}

TEST_CASE("fast transposed convolutions match a float64 scatter loop: kernel sizes 5 and 4") {
  std::mt19937_64 rng(122);
  for (int k : {5, 4}) {
    check_fast_network_layers(16, 3, k, 3, rng);  // 16 channels: a half panel with AVX-512
    check_fast_network_layers(48, 1, k, 1, rng);  // 48 = 1.5 AVX-512 panels; grey images
  }
  check_fast_network_layers(32, 1, 4, 3, rng);
  // The SHPC network's own layers, one image.
  for (int s = 0; s < kNumStages; ++s)
    check_fast_tconv({1, kStageSize[s], kStageChannels[s], kStageChannels[s + 1], kTaps,
                      s + 1 == kNumStages, s == 2, false},
                     rng);
}

TEST_CASE("fast layers refuse shapes their kernels do not take") {
  const std::vector<float> weight(9 * 16 * 16, 0.5f), bias(16, 0.0f);
  CHECK_THROWS_AS(pack_tconv({weight.data(), bias.data(), 16, 16, 4, 3}, nullptr, CpuIsa::Sse2),
                  std::logic_error);
  ThreadShare pool(1);
  const std::vector<float> in(padded_floats(32, 16), 0.0f);
  std::vector<float> images(64 * 64 * 2);
  const PackedLayer two_channels =
      pack_tconv({weight.data(), bias.data(), 16, 2, 32, 4}, nullptr, CpuIsa::Sse2);
  CHECK_THROWS_AS(tconv_tanh_fast(two_channels, in.data(), 1, images.data(), pool),
                  std::logic_error);
}

TEST_CASE("FACEGEN_CPU_ISA caps the instruction set and refuses unknown names") {
  const char* saved = std::getenv("FACEGEN_CPU_ISA");
  const std::string before = saved ? saved : "";
  ::setenv("FACEGEN_CPU_ISA", "sse2", 1);
  CHECK(best_cpu_isa() == CpuIsa::Sse2);
  ::setenv("FACEGEN_CPU_ISA", "avx2", 1);
  CHECK(best_cpu_isa() == (cpu_supports(CpuIsa::Avx2) ? CpuIsa::Avx2 : CpuIsa::Sse2));
  ::setenv("FACEGEN_CPU_ISA", "avx1024", 1);
  CHECK_THROWS_WITH_AS(best_cpu_isa(), "FACEGEN_CPU_ISA=avx1024 names none of avx512, avx2, sse2",
                       UserError);
  if (saved)
    ::setenv("FACEGEN_CPU_ISA", before.c_str(), 1);
  else
    ::unsetenv("FACEGEN_CPU_ISA");
}

}  // namespace
}  // namespace facegen
