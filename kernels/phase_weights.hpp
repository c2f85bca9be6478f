// phase_weights.hpp: a stride-2 k x k transposed convolution's weights rearranged once, at load
// time, into the four phase B matrices the phase GEMMs read (kernels/phase_gemm.cuh for the fixed-shape
// stages, kernels/tconv_any.cuh for any width). Host code, for the .cu files that upload them.
//
// weight (k, k, c_out, c_in), c_in fastest -> per phase z (in blockIdx.z order), K = taps * c_in,
// tap t = ty * taps_x + tx reading kernel tap (phase_kernel_index(py, ty), phase_kernel_index(px, tx)):
//   Fp32 (FFMA)          (K, c_out), c_out fastest: the FFMA kernels' B rows
//   Tf32, Bf16, Tf32x3   (c_out, K), K fastest: the rows ldmatrix and the wgmma tensor maps read;
//                        Tf32 values rounded to tf32, Bf16 rounded to nearest bfloat16, Tf32x3
//                        float32 as they are (the kernels split them)
// The phases' matrices follow one another, phase_k_offset(z, c_in, k) rows apart.
// phase_b_split_matrices: the Tf32x3 layout again for the float32 wgmma kernels
// (kernels/phase_gemm_wgmma_tf32x3.cuh), each phase as (2 c_out, K): hi = tf32(w) in rows 0..c_out-1,
// lo = tf32(w - hi) in rows c_out.., 2 phase_k_offset(z, c_in, k) rows apart; the parts the mma.sync
// kernels make in registers (split_tf32), made once.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <vector>

#include "kernels/cuda_helpers.cuh"
#include "kernels/phase_gemm.cuh"
#include "kernels/weight_folding.hpp"

namespace facegen {

// T: float for Fp32, Tf32 and Tf32x3, __nv_bfloat16 for Bf16.
template <typename T>
std::vector<T> phase_b_matrices(const float* w, int c_in, int c_out, int ksize, gpu::Math math) {
  std::vector<T> b(static_cast<size_t>(ksize) * ksize * c_out * c_in);
  for (int z = 0; z < 4; ++z) {
    const int py = gpu::phase_py(z), px = gpu::phase_px(z);
    const int nty = gpu::phase_taps(py, ksize), ntx = gpu::phase_taps(px, ksize);
    const size_t k_total = static_cast<size_t>(nty) * ntx * c_in;
    T* bz = b.data() + static_cast<size_t>(gpu::phase_k_offset(z, c_in, ksize)) * c_out;
    for (int ty = 0; ty < nty; ++ty)
      for (int tx = 0; tx < ntx; ++tx) {
        const int kh = gpu::phase_kernel_index(py, ty), kw = gpu::phase_kernel_index(px, tx);
        const size_t t = static_cast<size_t>(ty) * ntx + tx;
        for (int k = 0; k < c_out; ++k)
          for (int c = 0; c < c_in; ++c) {
            const float v = w[((static_cast<size_t>(kh) * ksize + kw) * c_out + k) * c_in + c];
            const size_t kk = t * c_in + c;
            if constexpr (sizeof(T) == 2) bz[k * k_total + kk] = __float2bfloat16_rn(v);
            else if (math == gpu::Math::Tf32) bz[k * k_total + kk] = round_to_tf32(v);
            else if (math == gpu::Math::Tf32x3) bz[k * k_total + kk] = v;
            else bz[kk * c_out + k] = v;
          }
      }
  }
  return b;
}

// (4 phases x (2 c_out, K)) floats: see the file comment.
inline std::vector<float> phase_b_split_matrices(const float* w, int c_in, int c_out, int ksize) {
  const std::vector<float> b = phase_b_matrices<float>(w, c_in, c_out, ksize, gpu::Math::Tf32x3);
  std::vector<float> split(2 * b.size());
  for (int z = 0; z < 4; ++z) {
    const size_t k_total = static_cast<size_t>(gpu::phase_k_total(z, c_in, ksize));
    const size_t offset = static_cast<size_t>(gpu::phase_k_offset(z, c_in, ksize)) * c_out;
    const float* bz = b.data() + offset;
    float* hi = split.data() + 2 * offset;
    float* lo = hi + k_total * c_out;
    for (size_t i = 0; i < k_total * c_out; ++i) {
      hi[i] = round_to_tf32(bz[i]);
      lo[i] = round_to_tf32(bz[i] - hi[i]);
    }
  }
  return split;
}

}  // namespace facegen
