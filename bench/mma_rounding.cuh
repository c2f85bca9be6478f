// mma_rounding.cuh: how this GPU's tensor cores add tf32 products into a float32 accumulator, probed
// with one mma.sync m16n8k8 whose exact result lies between two floats.
//
// A float32 path on tensor cores (three tf32 products per term, bench/split_products.cpp) keeps the
// FFMA path's accuracy only if the accumulation rounds to nearest; if it truncates, the emulation
// says its error grows 3 to 17 times unless each step starts from zero and is added with an FADD.
// Three probes, each D = C + A B with every D element the same value:
//   nearest+  C = 1, one product 0.75 ulp(1): round-to-nearest gives 1 + ulp, truncation gives 1;
//   nearest-  the same, negated;
//   small     C = 1, eight products of ulp(1) / 4: exactly 1 + 2 ulp if the products are added at full
//             width; 1 if each is aligned to the accumulator and its bits below the ulp are dropped.
//   smaller   the same with ulp(1) / 8: 1 + ulp if three bits below the accumulator's ulp are kept
//             (bench/split_products.cpp's emulation assumes two, the fewest the "small" answer allows).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "common/cuda_check.cuh"
#include "kernels/cuda_helpers.cuh"

namespace facegen {
namespace bench {

// One warp: D (16, 8) = C + A (16, 8) B (8, 8). single: only A's column 0 and B's row 0 are nonzero
// (a_val, b_val), so every D = c + a_val b_val; otherwise every A and B element is a_val, b_val.
// out (32 lanes, 4 values).
__global__ void mma_tf32_probe(float c, float a_val, float b_val, bool single, float* out) {
  const int lane = static_cast<int>(threadIdx.x), column_of_a = lane % 4;  // a0, a1 hold column lane % 4
  float d[4] = {c, c, c, c};
  uint32_t a[4];
  for (int i = 0; i < 4; ++i) a[i] = __float_as_uint(!single || (i < 2 && column_of_a == 0) ? a_val : 0.0f);
  // b.x holds row lane % 4, b.y row lane % 4 + 4
  const uint2 b = make_uint2(__float_as_uint(!single || column_of_a == 0 ? b_val : 0.0f),
                             __float_as_uint(single ? 0.0f : b_val));
  gpu::mma_sync_step<gpu::Math::Tf32>(d, a, b);
  for (int i = 0; i < 4; ++i) out[lane * 4 + i] = d[i];
}

// Prints one line per probe and adds mma_tf32_rounds_to_nearest and mma_tf32_small_products_kept
// (1 or 0; -1: the probe's 128 values disagreed or matched neither expectation). Returns the number
// of probes that matched neither.
inline int probe_mma_rounding(const std::function<void(const std::string&, double)>& add) {
  float* out;
  CUDA_CHECK(cudaMalloc(&out, 128 * sizeof(float)));
  const float ulp = std::ldexp(1.0f, -23);
  auto run = [&](float c, float a_val, float b_val, bool single) {
    mma_tf32_probe<<<1, 32>>>(c, a_val, b_val, single, out);
    CUDA_CHECK(cudaGetLastError());
    std::vector<float> d(128);
    CUDA_CHECK(cudaMemcpy(d.data(), out, d.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (float v : d)
      if (std::memcmp(&v, &d[0], sizeof v) != 0) return std::nanf("");
    return d[0];
  };
  struct Probe {
    const char* name;
    float c, a_val, b_val;
    bool single;
    float if_yes, if_no;  // the value meaning "yes" (nearest, kept) and "no" (truncated, dropped)
  };
  const Probe probes[] = {
      {"1 + 0.75 ulp", 1.0f, 0.75f * ulp, 1.0f, true, 1.0f + ulp, 1.0f},
      {"-1 - 0.75 ulp", -1.0f, -0.75f * ulp, 1.0f, true, -1.0f - ulp, -1.0f},
      {"1 + 8 x ulp/4", 1.0f, 0.25f * ulp, 1.0f, false, 1.0f + 2 * ulp, 1.0f},
      {"1 + 8 x ulp/8", 1.0f, 0.125f * ulp, 1.0f, false, 1.0f + ulp, 1.0f},
  };
  int unexpected = 0;
  double nearest = 1, kept = 1, kept_3 = 1;  // the single probes must both round to nearest
  std::printf("tensor-core tf32 accumulation (mma.sync m16n8k8, bench/mma_rounding.cuh):\n");
  for (const Probe& p : probes) {
    const float got = run(p.c, p.a_val, p.b_val, p.single);
    const double verdict = got == p.if_yes ? 1 : got == p.if_no ? 0 : -1;
    if (verdict < 0) ++unexpected;
    const bool third = !p.single && p.a_val < 0.2f * ulp;  // the ulp/8 probe
    std::printf("  %-14s -> %a  (%s)\n", p.name, static_cast<double>(got),
                verdict > 0 ? (p.single ? "rounded to nearest" : third ? "3 bits below the ulp kept" : "added at full width")
                : verdict == 0 ? (p.single ? "truncated toward zero" : third ? "fewer than 3 bits below the ulp kept"
                                                                            : "each product cut to the accumulator's ulp")
                               : "neither: see the value");
    if (p.single) nearest = std::min(nearest, verdict);
    else if (third) kept_3 = verdict;
    else kept = verdict;
  }
  add("mma_tf32_rounds_to_nearest", nearest);
  add("mma_tf32_small_products_kept", kept);
  add("mma_tf32_three_bits_kept", kept_3);
  CUDA_CHECK(cudaFree(out));
  return unexpected;
}

}  // namespace bench
}  // namespace facegen
