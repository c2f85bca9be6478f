// reference.hpp: a float64 CPU forward pass of the generator for the GPU tests and the benchmark,
// written as the formula reads (scatter form of the transposed convolution), deliberately unlike
// the GPU's gather-by-phase GEMMs. Also a seeded random network at unit-variance scales.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "generator/network.hpp"

namespace facegen {
namespace reference {

// Offsets of the network.bin blocks.
struct Offsets {
  int64_t proj_weight, proj_bias, bn[4], tconv_weight[4], tconv_bias[4];
  Offsets() {
    int64_t o = 0;
    proj_weight = o; o += int64_t{kLatentDim} * kProjOutputs;
    proj_bias = o;   o += kProjOutputs;
    for (int s = 0; s < kNumStages; ++s) {
      bn[s] = o;           o += 4 * kStageChannels[s];
      tconv_weight[s] = o; o += int64_t{kTaps} * kTaps * kStageChannels[s + 1] * kStageChannels[s];
      tconv_bias[s] = o;   o += kStageChannels[s + 1];
    }
  }
};

inline std::vector<float> random_network(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uni = [&](float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); };
  std::vector<float> f(kNetworkFloats);
  const Offsets o;
  auto fill = [&](int64_t at, int64_t count, float lo, float hi) {
    for (int64_t i = 0; i < count; ++i) f[at + i] = uni(lo, hi);
  };
  const float a0 = std::sqrt(3.f / kLatentDim);
  fill(o.proj_weight, int64_t{kLatentDim} * kProjOutputs, -a0, a0);
  fill(o.proj_bias, kProjOutputs, -0.1f, 0.1f);
  for (int s = 0; s < kNumStages; ++s) {
    const int c = kStageChannels[s], k = kStageChannels[s + 1];
    fill(o.bn[s], c, -0.2f, 0.2f);              // beta
    fill(o.bn[s] + c, c, 0.7f, 1.3f);           // gamma
    fill(o.bn[s] + 2 * c, c, -0.3f, 0.3f);      // mean
    fill(o.bn[s] + 3 * c, c, 0.6f, 1.4f);       // var
    const float a = std::sqrt(3.f / (6.25f * c * 0.5f));  // relu halves the input's second moment
    fill(o.tconv_weight[s], int64_t{kTaps} * kTaps * k * c, -a, a);
    fill(o.tconv_bias[s], k, -0.1f, 0.1f);
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
inline std::vector<double> tconv(const std::vector<double>& in, int h, int c_in, const float* w,
                                 const float* bias, int c_out) {
  const int ho = 2 * h;
  std::vector<double> out(static_cast<size_t>(ho) * ho * c_out, 0.0);
  for (int i = 0; i < h; ++i)
    for (int j = 0; j < h; ++j)
      for (int kh = 0; kh < kTaps; ++kh) {
        const int y = 2 * i + kh - 1;
        if (y < 0 || y >= ho) continue;
        for (int kw = 0; kw < kTaps; ++kw) {
          const int x = 2 * j + kw - 1;
          if (x < 0 || x >= ho) continue;
          const double* src = &in[(static_cast<size_t>(i) * h + j) * c_in];
          double* dst = &out[(static_cast<size_t>(y) * ho + x) * c_out];
          for (int k = 0; k < c_out; ++k) {
            const float* wk = w + ((static_cast<size_t>(kh) * kTaps + kw) * c_out + k) * c_in;
            double s = 0;
            for (int c = 0; c < c_in; ++c) s += src[c] * wk[c];
            dst[k] += s;
          }
        }
      }
  for (size_t i = 0; i < out.size(); ++i) out[i] += bias[i % c_out];
  return out;
}

// One image: z (100) -> (64, 64, 3).
inline std::vector<double> forward(const std::vector<float>& net, const float* z) {
  const Offsets o;
  std::vector<double> x(kProjOutputs);
  for (int j = 0; j < kProjOutputs; ++j) {
    double s = net[o.proj_bias + j];
    for (int k = 0; k < kLatentDim; ++k) s += static_cast<double>(z[k]) * net[o.proj_weight + int64_t{k} * kProjOutputs + j];
    x[j] = s;
  }
  for (int s = 0; s < kNumStages; ++s) {
    bn_relu(x, &net[o.bn[s]], kStageChannels[s]);
    x = tconv(x, kStageSize[s], kStageChannels[s], &net[o.tconv_weight[s]], &net[o.tconv_bias[s]], kStageChannels[s + 1]);
  }
  for (double& v : x) v = std::tanh(v);
  return x;
}

}  // namespace reference
}  // namespace facegen
