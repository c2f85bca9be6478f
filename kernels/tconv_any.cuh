// tconv_any.cuh: the stride-2 transposed convolutions of any network of the family
// (common/model_spec.hpp) as phase GEMMs, with channel counts, map size and kernel size (4 or 5)
// known only at run time, for the layers whose shape the fixed-shape kernels (kernels/phase_gemm.cuh)
// are not compiled for.
//
// Input pixel i writes output row 2i + kh - 1, so output row 2*oy + py reads input row oy + dy
// through the taps kh with kh + py odd (phase_taps, phase_kernel_index and phase_offset in
// phase_gemm.cuh): k = 5 gives 2 or 3 taps per parity, k = 4 gives 2 in both. For one phase (py, px):
//   A (M, K): M = n * H * H output positions, K = taps_y * taps_x * C_IN, gathered on the fly
//   B (K, N): N = C_OUT, rearranged once (kernels/phase_weights.hpp); fp32 (K, N) n fastest,
//             tf32/bf16 (N, K) k fastest, the layout ldmatrix reads
//   out(pixel of m, k) = relu(scale[k] * (A·B)(m, k) + shift[k])
// so no multiply touches an inserted zero. K tiles are 32 elements: C_IN is a multiple of 32 for
// every spec (2 * base_channels), so a K tile never straddles two taps.
//
// Every output is one thread's sum over K in a fixed order, whatever the tile shape, batch size or
// image position: in fp32 (FFMA, or Tf32x3 on tensor cores) a sum from zero per tap (an FFMA chain, or
// the k steps' fresh three-product sums added by FADD), the taps' sums added in tap order (as the
// fixed-shape kernels do; one chain over all of K let rounding grow with C_IN), in tf32 and bf16 the
// same sequence of mma.sync k-steps. No split-K, no atomics, so images are byte-identical across
// batch sizes and MPI rank counts.
#pragma once

#include <stdexcept>

#include "common/cuda_check.cuh"
#include "kernels/phase_gemm.cuh"

namespace facegen {
namespace gpu {

// Tile geometry. Tensor-core flavours: WARPS_M x WARPS_N warps of (BM / WARPS_M) x (BN / WARPS_N)
// outputs; fp32: threads of TM x 8 outputs (columns tx*4.. and BN/2 + tx*4..).
template <Math M, int BM_, int BN_, int WARPS_M_, int WARPS_N_, int TM_>
struct AnyTile {
  static constexpr int BM = BM_, BN = BN_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, TM = TM_;
  using Act = typename MathTypes<M>::Act;
  static constexpr int kStages = 3;
  static constexpr int BK = 32;
  static constexpr int kElemsPerChunk = 16 / sizeof(Act);        // one cp.async moves 16 bytes
  static constexpr int kChunksPerRow = BK / kElemsPerChunk;      // 8 (fp32, tf32) or 4 (bf16)
  static constexpr bool kNK = M != Math::Fp32;
  static constexpr int kThreads = M == Math::Fp32 ? (BM / TM) * (BN / 8) : 32 * WARPS_M * WARPS_N;
  // Rows 16 bytes longer than BK: 144 (fp32) or 80 (bf16) bytes apart, so the 8 rows of an
  // ldmatrix read fall in 8 different 16-byte bank groups.
  static constexpr int kApitch = BK + kElemsPerChunk;
  static constexpr int kBpitch = kNK ? BK + kElemsPerChunk : BN + 8;
  static constexpr int kAElems = BM * kApitch;
  static constexpr int kBElems = kNK ? BN * kBpitch : BK * kBpitch;
  static constexpr int kSmemBytes = kStages * (kAElems + kBElems) * static_cast<int>(sizeof(Act));
  static constexpr int kARowsPerThread = BM * kChunksPerRow / kThreads;
  static constexpr int kBChunks = kNK ? BN * kChunksPerRow : BK * BN / 4;
  static_assert((BM * kChunksPerRow) % kThreads == 0, "A tile chunks must divide among threads");
  static_assert(M == Math::Fp32 || ((BM / WARPS_M) % 16 == 0 && (BN / WARPS_N) % 16 == 0),
                "a warp tile is whole 16 x 16 ldmatrix blocks");
  static_assert(M != Math::Fp32 || (BM % TM == 0 && BN % 8 == 0), "fp32 threads own TM x 8 outputs");
};

// One phase's A tile (BM positions x 32 channels of one tap) and B tile into shared-memory stage
// `buf`, by cp.async. a_* describe this thread's A rows (see tconv_any_phase_gemm).
template <Math M, class S>
__device__ __forceinline__ void any_load_tile(typename S::Act* stage_base, int kt, const typename S::Act* in,
                                              const typename S::Act* const* a_base, const int* a_oy,
                                              const int* a_ox, const typename S::Act* b_phase, int k_total,
                                              int c_in, int c_out, int h, int ksize, int py, int px, int n0) {
  using Act = typename S::Act;
  constexpr int NT = S::kThreads;
  Act* As = stage_base;
  Act* Bs = As + S::kAElems;
  const int tid = threadIdx.x;
  const int k0 = kt * S::BK;
  const int tap = k0 / c_in, c0 = k0 % c_in;
  const int ntx = phase_taps(px, ksize);
  const int dy = phase_offset(py, tap / ntx), dx = phase_offset(px, tap % ntx);
  const int a_chunk = tid % S::kChunksPerRow;
#pragma unroll
  for (int r = 0; r < S::kARowsPerThread; ++r) {
    const int iy = a_oy[r] + dy, ix = a_ox[r] + dx;
    const bool valid = iy >= 0 && iy < h && ix >= 0 && ix < h;
    const Act* src = valid ? a_base[r] + (iy * h + ix) * c_in + c0 : in;
    const int row = tid / S::kChunksPerRow + (NT / S::kChunksPerRow) * r;
    cp_async16(As + row * S::kApitch + a_chunk * S::kElemsPerChunk, src, valid);
  }
  for (int q = tid; q < S::kBChunks; q += NT) {
    if constexpr (S::kNK) {  // (c_out, k_total), k fastest
      const int nrow = q / S::kChunksPerRow, ch = q % S::kChunksPerRow;
      const Act* src = b_phase + static_cast<int64_t>(n0 + nrow) * k_total + k0 + ch * S::kElemsPerChunk;
      cp_async16(Bs + nrow * S::kBpitch + ch * S::kElemsPerChunk, src, true);
    } else {  // (k_total, c_out), n fastest
      const int krow = q / (S::BN / 4), ch = q % (S::BN / 4);
      const Act* src = b_phase + static_cast<int64_t>(k0 + krow) * c_out + n0 + ch * 4;
      cp_async16(Bs + krow * S::kBpitch + ch * 4, src, true);
    }
  }
}

// One K tile of the stage into acc: fp32, this thread's TM x 8 outputs (kernels/cuda_helpers.cuh,
// ffma_k_tile); tf32 / bf16, this warp's (MI x 16) x (NI x 8) fragments by ldmatrix (mma_k_tile);
// Tf32x3 the same fragments in float32 (mma_tf32x3_k_tile).
template <class S>
__device__ __forceinline__ void any_compute_fp32(const float* As, const float* Bs, float* acc) {
  constexpr int TX = S::BN / 8;
  const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
  ffma_k_tile<S::BM, S::BN, S::BK, S::TM, S::kApitch, S::kBpitch>(As, Bs, tx, ty, acc);
}
template <Math M, class S>
__device__ __forceinline__ void any_compute_mma(const typename S::Act* As, const typename S::Act* Bs, float* acc) {
  constexpr int WM = S::BM / S::WARPS_M, WN = S::BN / S::WARPS_N, MI = WM / 16, NI = WN / 8;
  constexpr int kHalfK = 16 / static_cast<int>(sizeof(typename S::Act));  // 4 tf32 or 8 bf16
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int warp_m = warp % S::WARPS_M, warp_n = warp / S::WARPS_M;
  const int a_ld = (warp_m * WM + lane % 16) * S::kApitch + (lane / 16) * kHalfK;
  const int b_ld = (warp_n * WN + lane % 8 + (lane / 16) * 8) * S::kBpitch + ((lane / 8) % 2) * kHalfK;
  if constexpr (M == Math::Tf32x3) mma_tf32x3_k_tile<MI, NI, S::BK, S::kApitch, S::kBpitch>(As, Bs, a_ld, b_ld, acc);
  else mma_k_tile<M, MI, NI, S::BK, S::kApitch, S::kBpitch>(As, Bs, a_ld, b_ld, acc);
}

// Grid (ceil(M / BM), c_out / BN, 4 phases). in (n, h, h, c_in); out (n, 2h, 2h, c_out); weight: the
// four phases' B one after another; scale, shift (c_out). c_in % 32 == 0, c_out % BN == 0.
template <Math M, int BM, int BN, int WARPS_M, int WARPS_N, int TM>
__global__ void __launch_bounds__(AnyTile<M, BM, BN, WARPS_M, WARPS_N, TM>::kThreads)
tconv_any_phase_gemm(const typename MathTypes<M>::Act* __restrict__ in,
                     const typename MathTypes<M>::Act* __restrict__ weight,
                     const float* __restrict__ scale, const float* __restrict__ shift,
                     typename MathTypes<M>::Act* __restrict__ out,
                     int m_total, int c_in, int c_out, int h, int ksize) {
  using S = AnyTile<M, BM, BN, WARPS_M, WARPS_N, TM>;
  using Act = typename S::Act;
  constexpr int NT = S::kThreads;
  extern __shared__ __align__(16) unsigned char any_smem[];
  Act* smem = reinterpret_cast<Act*>(any_smem);
  const int tid = threadIdx.x, z = blockIdx.z;
  const int py = phase_py(z), px = phase_px(z);
  const int k_total = phase_taps(py, ksize) * phase_taps(px, ksize) * c_in;
  const int num_k_tiles = k_total / S::BK;
  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;

  // This thread's A rows: tid / chunks + (NT / chunks) * r, in chunk column tid % chunks.
  const Act* a_base[S::kARowsPerThread];
  int a_oy[S::kARowsPerThread], a_ox[S::kARowsPerThread];
#pragma unroll
  for (int r = 0; r < S::kARowsPerThread; ++r) {
    const int m = m0 + tid / S::kChunksPerRow + (NT / S::kChunksPerRow) * r;
    const int img = m / (h * h), pix = m % (h * h);
    a_base[r] = in + static_cast<int64_t>(img) * h * h * c_in + (tid % S::kChunksPerRow) * S::kElemsPerChunk;
    a_oy[r] = m < m_total ? pix / h : -1000;  // far outside: every tap invalid
    a_ox[r] = pix % h;
  }
  const Act* b_phase = weight + static_cast<int64_t>(phase_k_offset(z, c_in, ksize)) * c_out;
  auto load = [&](int buf, int kt) {
    any_load_tile<M, S>(smem + buf * (S::kAElems + S::kBElems), kt, in, a_base, a_oy, a_ox, b_phase, k_total,
                        c_in, c_out, h, ksize, py, px, n0);
  };

  constexpr int kAccs = M == Math::Fp32 ? TM * 8 : (BM / WARPS_M / 16) * (BN / WARPS_N / 8) * 4;
  // Fp32, Tf32x3: each tap's products go into tap_sum from zero, added into acc after the tap's last
  // K tile, as in the fixed-shape kernels (kernels/phase_gemm.cuh says why).
  constexpr bool kTapSummed = M == Math::Fp32 || M == Math::Tf32x3;
  constexpr int kTapSums = kTapSummed ? kAccs : 1;
  const int tiles_per_tap = c_in / S::BK;
  float acc[kAccs], tap_sum[kTapSums];
#pragma unroll
  for (int i = 0; i < kAccs; ++i) acc[i] = 0.f;
#pragma unroll
  for (int i = 0; i < kTapSums; ++i) tap_sum[i] = 0.f;

  // Three-stage cp.async pipeline: tiles kt+1 and kt+2 load while tile kt is multiplied.
#pragma unroll
  for (int s = 0; s < S::kStages - 1; ++s) {
    if (s < num_k_tiles) load(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < num_k_tiles; ++kt) {
    cp_async_wait<S::kStages - 2>();
    __syncthreads();
    const int next = kt + S::kStages - 1;
    if (next < num_k_tiles) load(next % S::kStages, next);
    cp_async_commit();
    const Act* As = smem + (kt % S::kStages) * (S::kAElems + S::kBElems);
    if constexpr (kTapSummed) {
      if constexpr (M == Math::Fp32) any_compute_fp32<S>(As, As + S::kAElems, tap_sum);
      else any_compute_mma<M, S>(As, As + S::kAElems, tap_sum);
      if ((kt + 1) % tiles_per_tap == 0) {
#pragma unroll
        for (int i = 0; i < kAccs; ++i) {
          acc[i] += tap_sum[i];
          tap_sum[i] = 0.f;
        }
      }
    } else {
      any_compute_mma<M, S>(As, As + S::kAElems, acc);
    }
  }
  cp_async_wait<0>();

  // Epilogue: relu(scale * acc + shift) into this phase's output pixels.
  auto out_ptr = [&](int m) -> Act* {
    const int img = m / (h * h), pix = m % (h * h), oy = pix / h, ox = pix % h;
    const int64_t p = (static_cast<int64_t>(img) * 2 * h + 2 * oy + py) * 2 * h + 2 * ox + px;
    return out + p * c_out;
  };
  if constexpr (M == Math::Fp32) {
    constexpr int TX = BN / 8, TY = BM / TM;
    const int tx = tid % TX, ty = tid / TX;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int m = m0 + ty + TY * i;
      if (m >= m_total) continue;
      float* o = out_ptr(m) + n0 + tx * 4;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int n = n0 + half * (BN / 2) + tx * 4 + j;
          v[j] = fmaxf(fmaf(acc[i * 8 + half * 4 + j], scale[n], shift[n]), 0.f);
        }
        Store<M>::four(o + half * (BN / 2), make_float4(v[0], v[1], v[2], v[3]));
      }
    }
  } else {
    constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N, MI = WM / 16, NI = WN / 8;
    const int lane = tid % 32, warp = tid / 32;
    const int warp_m = warp % WARPS_M, warp_n = warp / WARPS_M;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int m = m0 + warp_m * WM + mi * 16 + lane / 4 + half * 8;
        if (m >= m_total) continue;
        Act* o = out_ptr(m);
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
          const int n = n0 + warp_n * WN + ni * 8 + 2 * (lane % 4);
          const float* c = acc + (mi * NI + ni) * 4 + half * 2;
          Store<M>::two(o + n, fmaxf(fmaf(c[0], scale[n], shift[n]), 0.f),
                        fmaxf(fmaf(c[1], scale[n + 1], shift[n + 1]), 0.f));
        }
      }
  }
}

// The tile shapes the any-shape kernels launch, by the N tile: the widest of 64, 32, 16 that divides
// c_out. BM = 128 rows in every case. Tensor-core warp tiles: 64 x 32, 64 x 16 and 32 x 16 (Tf32x3
// holds a tap sum beside each total, so no wider).
template <Math M, int BN> struct AnyTileFor;
template <Math M> struct AnyTileFor<M, 64> {
  using T = AnyTile<M, 128, 64, 2, 2, 8>;  // fp32: 128 threads of 8 x 8
};
template <Math M> struct AnyTileFor<M, 32> {
  using T = AnyTile<M, 128, 32, 2, 2, 4>;  // fp32: 128 threads of 4 x 8
};
template <Math M> struct AnyTileFor<M, 16> {
  using T = AnyTile<M, 128, 16, 4, 1, 4>;  // fp32: 64 threads of 4 x 8
};

template <Math M, int BN>
void configure_tconv_any() {
  using T = typename AnyTileFor<M, BN>::T;
  CUDA_CHECK(cudaFuncSetAttribute(tconv_any_phase_gemm<M, T::BM, T::BN, T::WARPS_M, T::WARPS_N, T::TM>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes));
}

template <Math M, int BN>
void launch_tconv_any_tile(const void* in, int n, int h, int c_in, int c_out, int ksize, const void* weight,
                           const float* scale, const float* shift, void* out, cudaStream_t stream) {
  using T = typename AnyTileFor<M, BN>::T;
  using Act = typename MathTypes<M>::Act;
  const int m_total = n * h * h;
  const dim3 grid((m_total + T::BM - 1) / T::BM, c_out / BN, 4);
  tconv_any_phase_gemm<M, T::BM, T::BN, T::WARPS_M, T::WARPS_N, T::TM><<<grid, T::kThreads, T::kSmemBytes, stream>>>(
      static_cast<const Act*>(in), static_cast<const Act*>(weight), scale, shift, static_cast<Act*>(out), m_total,
      c_in, c_out, h, ksize);
  CUDA_CHECK_LAUNCH();
}

// The N tile of a layer with c_out output channels (c_out is a multiple of 16).
inline int tconv_any_tile_n(int c_out) { return c_out % 64 == 0 ? 64 : c_out % 32 == 0 ? 32 : 16; }

template <Math M>
void configure_tconv_any_all() {
  configure_tconv_any<M, 64>();
  configure_tconv_any<M, 32>();
  configure_tconv_any<M, 16>();
}

// (n, h, h, c_in) -> (n, 2h, 2h, c_out), activations of flavour M.
template <Math M>
void launch_tconv_any(const void* in, int n, int h, int c_in, int c_out, int ksize, const void* weight,
                      const float* scale, const float* shift, void* out, cudaStream_t stream) {
  if (c_in % 32 != 0 || c_out % 16 != 0 || (ksize != 4 && ksize != 5))
    throw std::logic_error("tconv_any_phase_gemm takes c_in % 32 == 0, c_out % 16 == 0, k = 4 or 5");
  switch (tconv_any_tile_n(c_out)) {
    case 64: launch_tconv_any_tile<M, 64>(in, n, h, c_in, c_out, ksize, weight, scale, shift, out, stream); break;
    case 32: launch_tconv_any_tile<M, 32>(in, n, h, c_in, c_out, ksize, weight, scale, shift, out, stream); break;
    default: launch_tconv_any_tile<M, 16>(in, n, h, c_in, c_out, ksize, weight, scale, shift, out, stream); break;
  }
}

}  // namespace gpu
}  // namespace facegen
