// weight_folding.hpp: host-side preparation of weights for the GPU kernels, shared by the fixed-shape
// kernels and the any-shape ones: inference batch norm folded into a per-channel epilogue, and the
// tf32 rounding the tensor cores expect of operands stored in memory.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/model_shape.hpp"

namespace facegen {

// Inference batch norm of `channels` channels after a layer with bias b (positions values, channel
// j % channels): relu(bn(acc + b)) becomes relu(scale * acc + shift), scale = gamma / sqrt(var + eps),
// shift = (b - mean) * scale + beta. bn: beta, gamma, mean, var, `channels` each.
inline void fold_batchnorm(const float* bn, int channels, const float* bias, int positions,
                           std::vector<float>* scale, std::vector<float>* shift) {
  const float *beta = bn, *gamma = bn + channels, *mean = bn + 2 * channels, *var = bn + 3 * channels;
  scale->resize(positions);
  shift->resize(positions);
  for (int j = 0; j < positions; ++j) {
    const int c = j % channels;
    const double s = static_cast<double>(gamma[c]) / std::sqrt(static_cast<double>(var[c]) + kBatchNormEps);
    (*scale)[j] = static_cast<float>(s);
    (*shift)[j] = static_cast<float>((static_cast<double>(bias[j]) - mean[c]) * s + beta[c]);
  }
}

// Nearest tf32, ties away from zero, as cvt.rna.tf32.f32; Inf and NaN pass through.
inline float round_to_tf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
  std::memcpy(&x, &u, 4);
  return x;
}

}  // namespace facegen
