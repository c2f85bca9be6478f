// reference.hpp: a float64 CPU forward pass of the generator for the GPU tests and the benchmark,
// written as the formula reads (scatter form of the transposed convolution), deliberately unlike
// the GPU's gather-by-phase GEMMs, for any network of the family (common/model_spec.hpp; the SHPC
// network by default). Also a seeded random network at unit-variance scales.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/model_shape.hpp"
#include "common/model_spec.hpp"

namespace facegen {
namespace reference {

// Offsets of the blocks of a network's flat float layout (common/model_spec.hpp), the SHPC spec's by default.
struct Offsets : WeightOffsets {
  explicit Offsets(const ModelSpec& spec = kShpcSpec) : WeightOffsets(spec) {}
};

// Seeded random weights for `spec`; biases are zeros where the spec has none.
inline std::vector<float> random_network(uint64_t seed, const ModelSpec& spec = kShpcSpec) {
  std::mt19937_64 rng(seed);
  auto uni = [&](float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); };
  const Offsets o(spec);
  std::vector<float> f(o.total, 0.f);
  auto fill = [&](int64_t at, int64_t count, float lo, float hi) {
    for (int64_t i = 0; i < count; ++i) f[at + i] = uni(lo, hi);
  };
  const float bias = spec.has_bias ? 0.1f : 0.f;
  const float a0 = std::sqrt(3.f / spec.latent_dim);
  fill(o.proj_weight, int64_t{spec.latent_dim} * spec.proj_outputs(), -a0, a0);
  fill(o.proj_bias, spec.proj_outputs(), -bias, bias);
  const float taps = 0.25f * spec.kernel_size * spec.kernel_size;  // taps per output pixel, on average
  for (int s = 0; s < spec.stages(); ++s) {
    const int c = spec.stage_channels(s), k = spec.stage_channels(s + 1);
    fill(o.bn[s], c, -0.2f, 0.2f);              // beta
    fill(o.bn[s] + c, c, 0.7f, 1.3f);           // gamma
    fill(o.bn[s] + 2 * c, c, -0.3f, 0.3f);      // mean
    fill(o.bn[s] + 3 * c, c, 0.6f, 1.4f);       // var
    const float a = std::sqrt(3.f / (taps * c * 0.5f));  // relu halves the input's second moment
    fill(o.tconv_weight[s], int64_t{spec.kernel_size} * spec.kernel_size * k * c, -a, a);
    fill(o.tconv_bias[s], k, -bias, bias);
  }
  return f;
}

// y (h, h, c) in place: relu(batch norm).
inline void bn_relu(std::vector<double>& x, const float* bn, int c) {
  for (size_t i = 0; i < x.size(); ++i) {
    const int ch = static_cast<int>(i % c);
    double v = (x[i] - bn[2 * c + ch]) / std::sqrt(static_cast<double>(bn[3 * c + ch]) + kBatchNormEps) * bn[c + ch] + bn[ch];
    x[i] = v > 0 ? v : 0;
  }
}

// (h, h, c_in) -> (2h, 2h, c_out): out(2i+kh-1, 2j+kw-1, k) += in(i, j, c) w[kh][kw][k][c], + bias.
// k x k kernel (5: the SHPC network's).
inline std::vector<double> tconv(const std::vector<double>& in, int h, int c_in, const float* w,
                                 const float* bias, int c_out, int k_size = kTaps) {
  const int ho = 2 * h;
  std::vector<double> out(static_cast<size_t>(ho) * ho * c_out, 0.0);
  for (int i = 0; i < h; ++i)
    for (int j = 0; j < h; ++j)
      for (int kh = 0; kh < k_size; ++kh) {
        const int y = 2 * i + kh - 1;
        if (y < 0 || y >= ho) continue;
        for (int kw = 0; kw < k_size; ++kw) {
          const int x = 2 * j + kw - 1;
          if (x < 0 || x >= ho) continue;
          const double* src = &in[(static_cast<size_t>(i) * h + j) * c_in];
          double* dst = &out[(static_cast<size_t>(y) * ho + x) * c_out];
          for (int k = 0; k < c_out; ++k) {
            const float* wk = w + ((static_cast<size_t>(kh) * k_size + kw) * c_out + k) * c_in;
            double s = 0;
            for (int c = 0; c < c_in; ++c) s += src[c] * wk[c];
            dst[k] += s;
          }
        }
      }
  for (size_t i = 0; i < out.size(); ++i) out[i] += bias[i % c_out];
  return out;
}

// How a GPU precision stores the activations it multiplies, for forward()'s emulation of its rounding:
// each value rounded to the stored type. kept_exact: none, the float64 forward itself.
using StoredRounding = double (*)(double);
inline double kept_exact(double v) { return v; }

// One image: z (nz) -> (size, size, nc). `stored` rounds the activations that enter each transposed
// convolution (after batch norm and ReLU, where the GPU stores them); rounding weights is the caller's.
inline std::vector<double> forward(const std::vector<float>& net, const float* z, const ModelSpec& spec = kShpcSpec,
                                   StoredRounding stored = kept_exact) {
  const Offsets o(spec);
  const int nz = spec.latent_dim, k_out = spec.proj_outputs();
  std::vector<double> x(k_out);
  for (int j = 0; j < k_out; ++j) {
    double s = net[o.proj_bias + j];
    for (int k = 0; k < nz; ++k) s += static_cast<double>(z[k]) * net[o.proj_weight + int64_t{k} * k_out + j];
    x[j] = s;
  }
  for (int s = 0; s < spec.stages(); ++s) {
    bn_relu(x, &net[o.bn[s]], spec.stage_channels(s));
    if (stored != kept_exact)
      for (double& v : x) v = stored(v);
    x = tconv(x, ModelSpec::stage_size(s), spec.stage_channels(s), &net[o.tconv_weight[s]], &net[o.tconv_bias[s]],
              spec.stage_channels(s + 1), spec.kernel_size);
  }
  for (double& v : x) v = std::tanh(v);
  return x;
}

}  // namespace reference
}  // namespace facegen
