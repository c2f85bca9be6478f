// mma_terms.cuh: float32 operands as sums of tensor-core input terms, laid out as the B fragments
// of mma_sync_step (kernels/cuda_helpers.cuh). Shared by the layers that keep (nearly) float32
// accuracy on tensor cores: kernels/tconv_output_mma.cuh (tconv4) and kernels/projection_mma.cuh.
//
// A float32 x is split into terms of the mma's input type: t0 = round(x), t1 = round(x - t0), ...
// (bf16: 8 significant bits each, so two terms carry 16 and three 24; tf32: 11 each). A product of
// two split values is the sum of the products of their terms, each one mma step accumulating in
// float32; the steps below a chosen size are left out.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cuda_helpers.cuh"
#include "kernels/weight_folding.hpp"

namespace facegen {
namespace gpu {

// Splits x into `terms` values of the mma's input type (each what the ones before it left over) and
// returns term `term`'s bits as the 32-bit register half (bf16) or register (tf32) the mma reads.
template <Math M>
inline uint32_t mma_operand_term(float x, int term) {
  float rest = x;
  for (int k = 0;; ++k) {
    if constexpr (M == Math::Bf16) {
      const __nv_bfloat16 part = __float2bfloat16_rn(rest);
      if (k == term) {
        uint16_t u;
        std::memcpy(&u, &part, 2);
        return u;
      }
      rest -= __bfloat162float(part);
    } else {
      const float part = round_to_tf32(rest);
      if (k == term) {
        uint32_t u;
        std::memcpy(&u, &part, 4);
        return u;
      }
      rest -= part;
    }
  }
}

// A K x N matrix, given as value(k, col) and split into `terms`, as the B fragments mma_sync_step
// reads, in the order lanes load them: (n-tile, k step, term, lane) -> two 32-bit registers r = 0, 1
// of column 8 * n-tile + lane / 4: bf16 rows k = 16 * step + 2 * (lane % 4) + 8 * r and k + 1 (low
// half first); tf32 row 8 * step + lane % 4 + 4 * r.
template <Math M, class Value>
std::vector<uint32_t> mma_b_fragments(int n_tiles, int k_steps, int terms, Value value) {
  std::vector<uint32_t> f(static_cast<size_t>(n_tiles) * k_steps * terms * 32 * 2);
  size_t i = 0;
  for (int nt = 0; nt < n_tiles; ++nt)
    for (int ks = 0; ks < k_steps; ++ks)
      for (int term = 0; term < terms; ++term)
        for (int lane = 0; lane < 32; ++lane)
          for (int r = 0; r < 2; ++r) {
            const int col = 8 * nt + lane / 4;
            if constexpr (M == Math::Bf16) {
              const int k = 16 * ks + 2 * (lane % 4) + 8 * r;
              f[i++] = mma_operand_term<M>(value(k, col), term) | mma_operand_term<M>(value(k + 1, col), term) << 16;
            } else {
              f[i++] = mma_operand_term<M>(value(8 * ks + lane % 4 + 4 * r, col), term);
            }
          }
  return f;
}

}  // namespace gpu
}  // namespace facegen
