// projection_mma.cuh: the projection, z (n, 100) -> act0 (n, 4, 4, 512) with the first batch norm and
// ReLU in its epilogue, on tensor cores (sm_80 and later), and its launcher: mma.sync m16n8k16 bf16 for
// the tf32 and bf16 networks, and float32 as three tf32 products (Tf32x3, m16n8k8) for fp32. The float32
// FFMA form (kernels/projection.cuh) stays for fp32 on FFMA.
//
//   out(img, j) = relu(scale[j] * sum_k z(img, k) W(k, j) + shift[j]),   W (100, 8192), j in NHWC order
//
// On FFMA the projection was bound by the broadcasts of z (0.45 ms at batch 8192 on an H200, 30
// TFLOP/s). Here it took 0.22 ms (bf16, same card, docs/benchmarks/notes.md v12-v14): the three products are
// 45 GFLOP of mma.sync at about 200 TFLOP/s, and every block re-reads its weight fragments from L2
// (470 MB per 8192 images); writing act0 (134 MB in bf16) alone would take about 0.035 ms.
//
// Accuracy (kernels/mma_terms.cuh): z and W are each split into two bf16 terms (16 significant bits),
// and each product is hi·hi + hi·lo + lo·hi, three mma steps accumulating in float32 (lo·lo, under
// 2^-16 of the product, is left out). The products then carry about 2^-16 relative error against
// tf32's 2^-11 and bf16's 2^-8 for a single rounding: far below the rounding of act0 itself.
//
// Tf32x3 (at the end of the file) keeps float32's accuracy instead: z and W each split into two tf32
// parts, three products per term, every k step of 8 from a zeroed accumulator added into the output's
// sum by FADD (kernels/cuda_helpers.cuh, mma_tf32x3_step).
//
// Tiles: a block of 4 warps makes 64 images x 128 columns, warp w columns 32 w .. 32 w + 31 for all 64
// images (4 m-tiles x 4 n-tiles: 64 accumulators per thread). The block first writes its 64 rows of z
// into shared memory as the two bf16 terms, K padded with zeros to 16 * kKSteps; each warp reads its A
// fragments from there. W's fragments are packed on the host in the order lanes read them, so each is
// one coalesced 8-byte load per lane. Each output is the k steps in order, hi·hi, hi·lo, lo·hi within
// each, whatever the batch size or the block: the bits do not depend on the batch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "common/cuda_check.cuh"
#include "kernels/mma_terms.cuh"
#include "kernels/phase_gemm.cuh"

namespace facegen {
namespace gpu {

template <int K_IN> struct ProjectionMmaShape {
  static constexpr int kKSteps = (K_IN + 15) / 16;  // m16n8k16 steps over K, zero-padded
  static constexpr int kImages = 64;                // per block: 4 m-tiles
  static constexpr int kMTiles = kImages / 16;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kWarpNTiles = 4;             // 32 columns per warp
  static constexpr int kColumns = 8 * kWarpNTiles * kWarps;  // 128 per block
  static constexpr int kTerms = 2;                  // bf16 terms of z and of W: hi, lo
  // z's terms in shared memory, per image: 8 * kKSteps 32-bit words (bf16 pairs along K) and 4 of
  // padding. The 8 rows one A-fragment load touches then start in 8 distinct groups of 4 banks.
  static constexpr int kPitchWords = 8 * kKSteps + 4;
  static_assert(kPitchWords % 8 == 4, "row pitch must put 8 rows in 8 distinct bank groups");
  static_assert(K_IN % 2 == 0, "z is read two values at a time");
};

// Tf32x3: k steps of 8 (m16n8k8 tf32), z float32 in shared memory, kPitch floats per image (8 rows of
// an A fragment load then start in 8 distinct groups of 4 banks); the block and warp tiles as above.
template <int K_IN> struct ProjectionTf32x3Shape : ProjectionMmaShape<K_IN> {
  static constexpr int kKSteps = (K_IN + 7) / 8;
  static constexpr int kPitch = 8 * kKSteps + 4;
  static_assert(kPitch % 8 == 4, "row pitch must put 8 rows in 8 distinct bank groups");
};

// W (k_in, k_out), k_out fastest, as the B fragments the projection kernel of M reads (mma_b_fragments'
// order: n-tile, k step, term, lane): two bf16 terms (Tf32, Bf16) or two tf32 parts (Tf32x3); rows
// past k_in are zero.
template <Math M, int K_IN>
std::vector<uint32_t> projection_weight_fragments(const float* w, int k_out) {
  auto at = [&](int k, int j) { return k < K_IN ? w[static_cast<int64_t>(k) * k_out + j] : 0.f; };
  if constexpr (M == Math::Tf32x3) {
    using S = ProjectionTf32x3Shape<K_IN>;
    return mma_b_fragments<Math::Tf32>(k_out / 8, S::kKSteps, S::kTerms, at);
  } else {
    using S = ProjectionMmaShape<K_IN>;
    return mma_b_fragments<Math::Bf16>(k_out / 8, S::kKSteps, S::kTerms, at);
  }
}

// Load: the block's rows of z as bf16 terms into zs[term][image][word]; rows past n and K past K_IN are zero.
template <int K_IN>
__device__ __forceinline__ void projection_load_terms(const float* __restrict__ z, int n, int img0, uint32_t* zs) {
  using S = ProjectionMmaShape<K_IN>;
  constexpr int kWords = 8 * S::kKSteps;
  for (int q = threadIdx.x; q < S::kImages * kWords; q += S::kThreads) {
    const int row = q / kWords, word = q % kWords, k = 2 * word;
    float2 v = make_float2(0.f, 0.f);
    if (img0 + row < n && k < K_IN) v = *reinterpret_cast<const float2*>(z + static_cast<int64_t>(img0 + row) * K_IN + k);
    const __nv_bfloat162 hi = __floats2bfloat162_rn(v.x, v.y);
    const float2 hif = __bfloat1622float2(hi);
    const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x - hif.x, v.y - hif.y);
    zs[row * S::kPitchWords + word] = *reinterpret_cast<const uint32_t*>(&hi);
    zs[(S::kImages + row) * S::kPitchWords + word] = *reinterpret_cast<const uint32_t*>(&lo);
  }
}

// Multiply: the warp's 64 x 32 accumulators over all k steps. wfrag points at the warp's first n-tile.
template <int K_IN>
__device__ __forceinline__ void projection_products(const uint32_t* zs, const uint2* __restrict__ wfrag,
                                                    float (&acc)[4][4][4]) {
  using S = ProjectionMmaShape<K_IN>;
  const int lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
#pragma unroll
  for (int ks = 0; ks < S::kKSteps; ++ks) {
    uint2 b[S::kWarpNTiles][S::kTerms];
#pragma unroll
    for (int nt = 0; nt < S::kWarpNTiles; ++nt)
#pragma unroll
      for (int term = 0; term < S::kTerms; ++term)
        b[nt][term] = __ldg(wfrag + ((nt * S::kKSteps + ks) * S::kTerms + term) * 32 + lane);
#pragma unroll
    for (int mt = 0; mt < S::kMTiles; ++mt) {
      uint32_t a[S::kTerms][4];
#pragma unroll
      for (int term = 0; term < S::kTerms; ++term) {
        const uint32_t* row = zs + (term * S::kImages + 16 * mt + g) * S::kPitchWords + 8 * ks + t4;
        a[term][0] = row[0];
        a[term][1] = row[8 * S::kPitchWords];
        a[term][2] = row[4];
        a[term][3] = row[8 * S::kPitchWords + 4];
      }
#pragma unroll
      for (int nt = 0; nt < S::kWarpNTiles; ++nt) {
        mma_sync_step<Math::Bf16>(acc[mt][nt], a[0], b[nt][0]);
        mma_sync_step<Math::Bf16>(acc[mt][nt], a[0], b[nt][1]);
        mma_sync_step<Math::Bf16>(acc[mt][nt], a[1], b[nt][0]);
      }
    }
  }
}

// Epilogue: relu(scale * acc + shift) of the warp's 64 x 32 outputs, columns j0 .. j0 + 31, in M's
// activation type (float32, tf32-rounded float32 or bf16).
template <Math M, int K_IN>
__device__ __forceinline__ void projection_store(const float (&acc)[4][4][4], const float* __restrict__ scale,
                                                 const float* __restrict__ shift, int n, int k_out, int img0, int j0,
                                                 typename MathTypes<M>::Act* __restrict__ out) {
  using S = ProjectionMmaShape<K_IN>;
  const int lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
#pragma unroll
  for (int nt = 0; nt < S::kWarpNTiles; ++nt) {
    const int j = j0 + 8 * nt + 2 * t4;
    const float sc0 = scale[j], sc1 = scale[j + 1], sh0 = shift[j], sh1 = shift[j + 1];
#pragma unroll
    for (int mt = 0; mt < S::kMTiles; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int img = img0 + 16 * mt + g + 8 * half;
        if (img >= n) continue;
        Store<M>::two(out + static_cast<int64_t>(img) * k_out + j, fmaxf(fmaf(acc[mt][nt][2 * half], sc0, sh0), 0.f),
                      fmaxf(fmaf(acc[mt][nt][2 * half + 1], sc1, sh1), 0.f));
      }
  }
}

template <Math M, int K_IN>
__global__ void __launch_bounds__(ProjectionMmaShape<K_IN>::kThreads, 4)
projection_bn_relu_mma(const float* __restrict__ z,        // (n, K_IN)
                       int n, int k_out,
                       const uint32_t* __restrict__ wfrag,  // see projection_weight_fragments
                       const float* __restrict__ scale, const float* __restrict__ shift,  // (k_out)
                       typename MathTypes<M>::Act* __restrict__ out) {                   // (n, k_out)
  using S = ProjectionMmaShape<K_IN>;
  __shared__ uint32_t zs[S::kTerms * S::kImages * S::kPitchWords];
  const int img0 = blockIdx.y * S::kImages, warp = threadIdx.x / 32;
  const int nt0 = (blockIdx.x * S::kWarps + warp) * S::kWarpNTiles;
  projection_load_terms<K_IN>(z, n, img0, zs);
  __syncthreads();
  float acc[4][4][4] = {};
  static_assert(S::kMTiles == 4 && S::kWarpNTiles == 4, "acc is 4 m-tiles x 4 n-tiles");
  const uint2* wfrag_warp = reinterpret_cast<const uint2*>(wfrag) + int64_t{nt0} * S::kKSteps * S::kTerms * 32;
  projection_products<K_IN>(zs, wfrag_warp, acc);
  projection_store<M, K_IN>(acc, scale, shift, n, k_out, img0, 8 * nt0, out);
}

// Load (Tf32x3): the block's rows of z, float32, into zs[image][k]; rows past n and K past K_IN are zero.
template <int K_IN>
__device__ __forceinline__ void projection_load_z(const float* __restrict__ z, int n, int img0, float* zs) {
  using S = ProjectionTf32x3Shape<K_IN>;
  constexpr int kPairs = 4 * S::kKSteps;  // float2 per row
  for (int q = threadIdx.x; q < S::kImages * kPairs; q += S::kThreads) {
    const int row = q / kPairs, k = 2 * (q % kPairs);
    float2 v = make_float2(0.f, 0.f);
    if (img0 + row < n && k < K_IN) v = *reinterpret_cast<const float2*>(z + static_cast<int64_t>(img0 + row) * K_IN + k);
    *reinterpret_cast<float2*>(zs + row * S::kPitch + k) = v;
  }
}

// Multiply (Tf32x3): the warp's 64 x 32 outputs over all k steps of 8, each A fragment split into its
// tf32 parts once and used for the warp's 4 n-tiles. wfrag points at the warp's first n-tile.
template <int K_IN>
__device__ __forceinline__ void projection_products_tf32x3(const float* zs, const uint2* __restrict__ wfrag,
                                                           float (&acc)[4][4][4]) {
  using S = ProjectionTf32x3Shape<K_IN>;
  const int lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  for (int ks = 0; ks < S::kKSteps; ++ks) {
    uint2 b[S::kWarpNTiles][S::kTerms];
#pragma unroll
    for (int nt = 0; nt < S::kWarpNTiles; ++nt)
#pragma unroll
      for (int term = 0; term < S::kTerms; ++term)
        b[nt][term] = __ldg(wfrag + ((nt * S::kKSteps + ks) * S::kTerms + term) * 32 + lane);
#pragma unroll
    for (int mt = 0; mt < S::kMTiles; ++mt) {
      // m16n8k8 tf32 A: rows g and g + 8, columns t4 and t4 + 4 of the k step.
      const float* row = zs + (16 * mt + g) * S::kPitch + 8 * ks + t4;
      const float a[4] = {row[0], row[8 * S::kPitch], row[4], row[8 * S::kPitch + 4]};
      uint32_t a_hi[4], a_lo[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) split_tf32(__float_as_uint(a[r]), a_hi[r], a_lo[r]);
#pragma unroll
      for (int nt = 0; nt < S::kWarpNTiles; ++nt) mma_tf32x3_step(acc[mt][nt], a_hi, a_lo, b[nt][0], b[nt][1]);
    }
  }
}

template <int K_IN>
__global__ void __launch_bounds__(ProjectionTf32x3Shape<K_IN>::kThreads, 3)
projection_bn_relu_tf32x3(const float* __restrict__ z,        // (n, K_IN)
                          int n, int k_out,
                          const uint32_t* __restrict__ wfrag,  // see projection_weight_fragments<Math::Tf32x3>
                          const float* __restrict__ scale, const float* __restrict__ shift,  // (k_out)
                          float* __restrict__ out) {                                         // (n, k_out)
  using S = ProjectionTf32x3Shape<K_IN>;
  __shared__ __align__(16) float zs[S::kImages * S::kPitch];
  const int img0 = blockIdx.y * S::kImages, warp = threadIdx.x / 32;
  const int nt0 = (blockIdx.x * S::kWarps + warp) * S::kWarpNTiles;
  projection_load_z<K_IN>(z, n, img0, zs);
  __syncthreads();
  float acc[4][4][4] = {};
  const uint2* wfrag_warp = reinterpret_cast<const uint2*>(wfrag) + int64_t{nt0} * S::kKSteps * S::kTerms * 32;
  projection_products_tf32x3<K_IN>(zs, wfrag_warp, acc);
  projection_store<Math::Tf32x3, K_IN>(acc, scale, shift, n, k_out, img0, 8 * nt0, out);
}

// z (n, K_IN) float32 -> out (n, k_out) in M's activation type (Tf32x3: float32; tf32; bf16);
// k_out % kColumns == 0.
template <Math M, int K_IN>
void launch_projection_bn_relu_mma(const float* z, int n, int k_out, const uint32_t* wfrag, const float* scale,
                                   const float* shift, void* out, cudaStream_t stream) {
  static_assert(M != Math::Fp32, "fp32 on FFMA runs the FFMA projection (kernels/projection.cuh)");
  using S = ProjectionMmaShape<K_IN>;
  if (n <= 0) return;
  const dim3 grid(k_out / S::kColumns, (n + S::kImages - 1) / S::kImages);
  if constexpr (M == Math::Tf32x3)
    projection_bn_relu_tf32x3<K_IN><<<grid, S::kThreads, 0, stream>>>(z, n, k_out, wfrag, scale, shift, static_cast<float*>(out));
  else
    projection_bn_relu_mma<M, K_IN><<<grid, S::kThreads, 0, stream>>>(
        z, n, k_out, wfrag, scale, shift, static_cast<typename MathTypes<M>::Act*>(out));
  CUDA_CHECK_LAUNCH();
}

}  // namespace gpu
}  // namespace facegen
