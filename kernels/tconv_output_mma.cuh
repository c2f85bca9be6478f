// tconv_output_mma.cuh: the last transposed convolution (64 -> 3 channels, 32x32 -> 64x64, a KS x KS
// kernel, KS = 5 or 4) with bias and tanh, for bf16, tf32 and float32 (Tf32x3) activations, on tensor
// cores (mma.sync, sm_80 and later), as a GEMM and a col2im inside one block. Below, the figures are for KS = 5; KS = 4
// has 48 columns of Y (6 n-tiles, none padding) and four taps in every phase.
//
// With 3 output channels the direct form (kernels/phase_gemm.cuh, tconv_output_tanh) is bound by
// FFMA issue. Here every input pixel q first gets all its products at once:
//   Y (P, 80) = A (P, 64) · W' (64, 80),  W'(c, 3 * tap + k) = weight[kh][kw][k][c], tap = 5 kh + kw
// (75 columns used, padded to 10 n-tiles of 8), then each output pixel sums the Y entries of its
// phase's taps (4, 6, 6 or 9), adds the bias and takes tanh:
//   out(2 oy + py, 2 ox + px, k) = tanh(bias[k] + sum over taps (ty, tx) of Y(q(oy + dy, ox + dx), 3 tap + k)).
// The GEMM is 4800 multiply-adds per input pixel, as in the direct form; on tensor cores, one mma per
// weight term. Reading the activations and writing the images alone would take about 0.38 ms at
// batch 8192 (1.5 GB); the kernel takes about 1.0 ms (see the timings below).
//
// Accuracy: the activations are exact in the mma's input type already (bf16, or tf32-rounded float32).
// Each weight is split into terms of that type (hi = round(w), then what hi left over), one mma step
// per term, and products accumulate in float32: tf32 two terms (22 bits; about 1e-7 after tanh), bf16
// two (16 bits: each weight within 2^-18 of itself, so an output within about 2^-18 of the sum of its
// |products|, far inside the 2^-9 of the bf16 activations themselves; the GPU tests bound it so).
// Tf32x3 (--precision fp32 on tensor cores): float32 activations split into two tf32 parts in
// registers, the weights' two tf32 terms as for tf32, three products per term, each k step of 8 from a
// zeroed accumulator added into Y by FADD (kernels/cuda_helpers.cuh, mma_tf32x3_step): each Y entry is
// one tap's sum, and the col2im adds the taps, as float32 FFMA's per-tap sums do.
// Timings at batch 8192 on an H200 (2026-11-23): three bf16 terms (24 bits) 1.135-1.152 ms and tf32's
// two 1.79-1.87, in about the ratio of their mma issue (300 and 480 bf16-mma equivalents per input
// row); two bf16 terms 1.00-1.03 ms, 10% less rather than the third the mma count alone predicted,
// so something beside the mma issue (the col2im's shared-memory reads, the halo rows' extra 25% of
// products, one block per SM) holds the rest; bf16 keeps two terms.
//
// A tile is 2 x kInRows output rows (kInRows input rows) of one image: its A tile is those rows with
// one halo row each side (zeros outside the map, which makes their Y zero); 8 warps compute Y (float32,
// 80 columns) into shared memory, each warp 40 of the columns (its weight fragments stay in registers)
// for 16 positions at a time; then 256 threads make the tile's output pixels. bf16 tiles are 8 input rows (320 positions), tf32 tiles 4 (192: the
// float32 rows are twice the bytes). The grid is persistent (one block per SM, tiles t, t + grid, ...):
// the next tile's rows load with cp.async into the other of two A buffers while this tile is computed.
// Every output is the same sequence of operations whatever the batch size and the image's position:
// fixed K order inside the GEMM, taps in a fixed order in the sum.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/cuda_check.cuh"
#include "kernels/mma_terms.cuh"
#include "kernels/phase_gemm.cuh"
#include "kernels/weight_folding.hpp"

namespace facegen {
namespace gpu {

// What differs between the two precisions; everything else is shared.
template <Math M> struct OutputMmaTraits;
template <> struct OutputMmaTraits<Math::Bf16> {
  using Act = __nv_bfloat16;
  static constexpr int kInRows = 8;   // input rows per tile
  static constexpr int kKStep = 16;   // m16n8k16
  static constexpr int kTerms = 2;    // bf16 terms per weight: hi, lo
};
template <> struct OutputMmaTraits<Math::Tf32> {
  using Act = float;
  static constexpr int kInRows = 4;
  static constexpr int kKStep = 8;    // m16n8k8
  static constexpr int kTerms = 2;    // tf32 terms per weight: hi, lo
};
template <> struct OutputMmaTraits<Math::Tf32x3> : OutputMmaTraits<Math::Tf32> {};

constexpr int kOmCin = 64;
constexpr int kOmThreads = 256;

template <Math M, int KS> struct OutputMmaShape : OutputMmaTraits<M> {
  using T = OutputMmaTraits<M>;
  using Act = typename T::Act;
  static_assert(KS == 4 || KS == 5, "kernel size 4 or 5");
  static constexpr int kTaps = KS * KS;
  static constexpr int kNTiles = (3 * kTaps + 7) / 8;  // Y's columns, 8 an n-tile: k 5 80 (75 used), k 4 48
  static constexpr int kNHalf = kNTiles / 2;           // a warp's piece of Y: 5 or 3 n-tiles
  static_assert(kNTiles % 2 == 0, "two warps share the n-tiles");
  static constexpr int kYpitch = KS == 5 ? 76 : 52;    // float32 per position of Y: the used columns and a few more
  static constexpr int kPositions = (T::kInRows + 2) * 32;  // with a halo row each side
  static constexpr int kMTiles = kPositions / 16;
  static constexpr int kKSteps = kOmCin / T::kKStep;
  static constexpr int kChunksPerPosition = kOmCin * static_cast<int>(sizeof(Act)) / 16;
  // Activation row pitch: 64 values + 16 bytes, so the 8 rows of an ldmatrix fall in 8 bank groups.
  static constexpr int kApitch = kOmCin + 16 / static_cast<int>(sizeof(Act));
  static constexpr int kABytes = kPositions * kApitch * static_cast<int>(sizeof(Act));
  // Weight fragments: (n-tile, k step, term, lane) -> two 32-bit registers, in the order lanes read them.
  static constexpr int kWeightWords = kNTiles * kKSteps * T::kTerms * 32 * 2;
  static constexpr int kYBytes = kPositions * kYpitch * 4;
  // bf16 185 KB (within the 227 KB a block may have on sm_90), tf32 159 KB (also within sm_80's 163 KB);
  // devices with less run the direct kernel.
  static constexpr int kSmemBytes = 2 * kABytes + kYBytes;
  static constexpr int kTilesPerImage = 32 / T::kInRows;
};

// The last tconv's weights (KS, KS, 3, 64) as the B fragments tconv_output_tanh_mma<M, KS> reads:
// W'(c, 3 * tap + k) = w[kh][kw][k][c], tap = KS kh + kw; columns past 3 KS^2 (k 5: 75..79) zero, in
// mma_b_fragments' order.
template <Math M, int KS>
std::vector<uint32_t> output_mma_weight_fragments(const float* w) {
  using S = OutputMmaShape<M, KS>;
  auto w_prime = [&](int c, int col) -> float {
    if (col >= 3 * S::kTaps) return 0.f;
    const int tap = col / 3, k = col % 3;
    return w[(static_cast<size_t>(tap) * 3 + k) * kOmCin + c];
  };
  return mma_b_fragments<M == Math::Tf32x3 ? Math::Tf32 : M>(S::kNTiles, S::kKSteps, S::kTerms, w_prime);
}

// Load: the activation rows of tile t (with halo) into As, issued as cp.async, not awaited.
template <Math M, int KS>
__device__ __forceinline__ void output_mma_load_rows(const typename OutputMmaShape<M, KS>::Act* __restrict__ in, int t,
                                                     typename OutputMmaShape<M, KS>::Act* As) {
  using S = OutputMmaShape<M, KS>;
  constexpr int kElemsPerChunk = 16 / sizeof(typename S::Act);
  const auto* in_img = in + static_cast<int64_t>(t / S::kTilesPerImage) * 32 * 32 * kOmCin;
  const int y0 = (t % S::kTilesPerImage) * S::kInRows;
  for (int q = threadIdx.x; q < S::kPositions * S::kChunksPerPosition; q += kOmThreads) {
    const int p = q / S::kChunksPerPosition, chunk = q % S::kChunksPerPosition;
    const int iy = y0 - 1 + p / 32, ix = p % 32;
    const bool valid = iy >= 0 && iy < 32;
    const auto* src = valid ? in_img + (iy * 32 + ix) * kOmCin + chunk * kElemsPerChunk : in_img;
    cp_async16(As + p * S::kApitch + chunk * kElemsPerChunk, src, valid);
  }
}

// A warp's B fragments, held in registers for the whole kernel: its half of the n-tiles (warp % 2),
// every k step and term (bf16 80 registers, tf32 and Tf32x3 160). Reading them from shared memory for every
// mma made shared memory the kernel's limit (two wavefronts per mma, more than the A, Y and col2im
// traffic together).
template <Math M, int KS> struct OutputMmaWeights {
  uint2 b[OutputMmaShape<M, KS>::kNHalf][OutputMmaShape<M, KS>::kKSteps][OutputMmaShape<M, KS>::kTerms];
};

// Load: this warp's B fragments from global memory (wfrag: (n-tile, k step, term, lane) -> uint2).
template <Math M, int KS>
__device__ __forceinline__ void output_mma_load_weights(const uint32_t* __restrict__ wfrag, OutputMmaWeights<M, KS>& w) {
  using S = OutputMmaShape<M, KS>;
  const int lane = threadIdx.x % 32, n0 = (threadIdx.x / 32 % 2) * S::kNHalf;
  const uint2* frag = reinterpret_cast<const uint2*>(wfrag);
#pragma unroll
  for (int n = 0; n < S::kNHalf; ++n)
#pragma unroll
    for (int ks = 0; ks < S::kKSteps; ++ks)
#pragma unroll
      for (int term = 0; term < S::kTerms; ++term)
        w.b[n][ks][term] = __ldg(frag + (((n0 + n) * S::kKSteps + ks) * S::kTerms + term) * 32 + lane);
}

// Multiply: Y into shared memory. Warp w makes the n-tiles of its weights (half w % 2) for m-tiles
// w / 2, w / 2 + 4, ...: pieces of 16 positions x 40 columns. Each Y value is k steps in order, the
// terms in order within each (Tf32x3: each k step's three products from zero, then added).
template <Math M, int KS>
__device__ __forceinline__ void output_mma_products(const typename OutputMmaShape<M, KS>::Act* As,
                                                    const OutputMmaWeights<M, KS>& w, float* Ys) {
  using S = OutputMmaShape<M, KS>;
  constexpr int kHalfK = 16 / sizeof(typename S::Act);  // elements in 16 bytes: 8 bf16, 4 tf32
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t4 = lane % 4, n0 = (warp % 2) * S::kNHalf;
  for (int mt = warp / 2; mt < S::kMTiles; mt += kOmThreads / 64) {
    float acc[S::kNHalf][4];
#pragma unroll
    for (int n = 0; n < S::kNHalf; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[n][i] = 0.f;
#pragma unroll
    for (int ks = 0; ks < S::kKSteps; ++ks) {
      uint32_t a[4];
      ldmatrix_x4(a, As + (mt * 16 + lane % 16) * S::kApitch + ks * S::kKStep + (lane / 16) * kHalfK);
      if constexpr (M == Math::Tf32x3) {
        uint32_t a_hi[4], a_lo[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) split_tf32(a[r], a_hi[r], a_lo[r]);
#pragma unroll
        for (int n = 0; n < S::kNHalf; ++n) mma_tf32x3_step(acc[n], a_hi, a_lo, w.b[n][ks][0], w.b[n][ks][1]);
      } else {
#pragma unroll
        for (int n = 0; n < S::kNHalf; ++n)
#pragma unroll
          for (int term = 0; term < S::kTerms; ++term) mma_sync_step<M>(acc[n], a, w.b[n][ks][term]);
      }
    }
#pragma unroll
    for (int n = 0; n < S::kNHalf; ++n) {
      const int col = (n0 + n) * 8 + 2 * t4;
      if (col >= S::kYpitch) continue;  // k 5: padding columns 76..79
#pragma unroll
      for (int half = 0; half < 2; ++half)
        *reinterpret_cast<float2*>(Ys + (mt * 16 + g + 8 * half) * S::kYpitch + col) =
            make_float2(acc[n][2 * half], acc[n][2 * half + 1]);
    }
  }
  __syncthreads();
}

// Epilogue (col2im + tanh): the tile's output pixels, row oyl (0 .. 2 kInRows - 1) of the tile,
// column x, each thread 2 kInRows * 64 / 256 of them: tanh(bias + sum of taps).
template <Math M, int KS>
__device__ __forceinline__ void output_mma_col2im(const float* Ys, const float* __restrict__ bias,
                                                  float* __restrict__ out_img, int y0) {
  using S = OutputMmaShape<M, KS>;
  const int x = threadIdx.x % 64, px = x & 1, ox = x >> 1;
  const float b0 = bias[0], b1 = bias[1], b2 = bias[2];
#pragma unroll
  for (int i = 0; i < 2 * S::kInRows * 64 / kOmThreads; ++i) {
    const int oyl = threadIdx.x / 64 + (kOmThreads / 64) * i, py = oyl & 1, r = (oyl >> 1) + 1;
    float s0 = 0.f, s1 = 0.f, s2 = 0.f;
#pragma unroll
    for (int ty = 0; ty < 3; ++ty) {
      if (ty >= phase_taps(py, KS)) break;
      const int kh = phase_kernel_index(py, ty), dy = phase_offset(py, ty);
#pragma unroll
      for (int tx = 0; tx < 3; ++tx) {
        if (tx >= phase_taps(px, KS)) break;
        const int kw = phase_kernel_index(px, tx), ix = ox + phase_offset(px, tx);
        if (ix < 0 || ix >= 32) continue;
        const float* y = Ys + ((r + dy) * 32 + ix) * S::kYpitch + (kh * KS + kw) * 3;
        s0 += y[0];
        s1 += y[1];
        s2 += y[2];
      }
    }
    float* o = out_img + ((2 * y0 + oyl) * 64 + x) * 3;
    o[0] = tanhf(s0 + b0);
    o[1] = tanhf(s1 + b1);
    o[2] = tanhf(s2 + b2);
  }
}

template <Math M, int KS>
__global__ void __launch_bounds__(kOmThreads, 1)
tconv_output_tanh_mma(const typename OutputMmaShape<M, KS>::Act* __restrict__ in,  // (n, 32, 32, 64)
                      const uint32_t* __restrict__ wfrag,  // kWeightWords, see output_mma_weight_fragments
                      const float* __restrict__ bias,      // (3)
                      float* __restrict__ out,             // (n, 64, 64, 3)
                      int tiles) {                         // n * kTilesPerImage
  using S = OutputMmaShape<M, KS>;
  using Act = typename S::Act;
  extern __shared__ __align__(16) unsigned char om_smem[];
  Act* const a_buffers = reinterpret_cast<Act*>(om_smem);  // two of kABytes
  auto As = [&](int i) { return a_buffers + (i % 2) * (S::kABytes / static_cast<int>(sizeof(Act))); };
  float* Ys = reinterpret_cast<float*>(om_smem + 2 * S::kABytes);
  if (blockIdx.x < tiles) output_mma_load_rows<M, KS>(in, blockIdx.x, As(0));
  cp_async_commit();
  OutputMmaWeights<M, KS> w;
  output_mma_load_weights<M, KS>(wfrag, w);
  for (int t = blockIdx.x, i = 0; t < tiles; t += gridDim.x, ++i) {
    // The other buffer was last read by the previous tile's products, which ended with a barrier.
    if (t + static_cast<int>(gridDim.x) < tiles) output_mma_load_rows<M, KS>(in, t + gridDim.x, As(i + 1));
    cp_async_commit();
    cp_async_wait<1>();  // this tile's rows have landed
    __syncthreads();
    output_mma_products<M, KS>(As(i), w, Ys);
    const int img = t / S::kTilesPerImage, y0 = (t % S::kTilesPerImage) * S::kInRows;
    output_mma_col2im<M, KS>(Ys, bias, out + static_cast<int64_t>(img) * 64 * 64 * 3, y0);
    __syncthreads();  // Ys is rewritten by the next tile's products
  }
  cp_async_wait<0>();
}

// Launch: a persistent grid of at most one block per SM over n images' tiles.
template <Math M, int KS>
void launch_tconv_output_tanh_mma(const void* act3, int n, const uint32_t* wfrag, const float* bias, float* images,
                                  int sm_count, cudaStream_t stream) {
  const int tiles = n * OutputMmaShape<M, KS>::kTilesPerImage;
  tconv_output_tanh_mma<M, KS><<<std::min(tiles, sm_count), kOmThreads, OutputMmaShape<M, KS>::kSmemBytes, stream>>>(
      static_cast<const typename OutputMmaShape<M, KS>::Act*>(act3), wfrag, bias, images, tiles);
  CUDA_CHECK_LAUNCH();
}

}  // namespace gpu
}  // namespace facegen
