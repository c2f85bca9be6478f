// phase_gemm.cuh: the generator's stride-2 k x k transposed convolutions (k = 5, the SHPC alignment,
// or k = 4, PyTorch's padding 1) as implicit GEMMs, one per output parity ("phase"), so that no
// multiply touches an inserted zero.
//
// Input pixel i writes output row 2i + kh - 1, so output pixel (2*oy + py, 2*ox + px) of a phase
// reads input (oy + dy, ox + dx) through kernel tap (kh, kw): py = 0 uses kh in {1, 3}, py = 1 uses
// kh in {0, 2} and, for k = 5, 4; dy = (py + 1 - kh) / 2 (the same for x). For k = 5 the four
// phases use 4, 6, 6 and 9 of the 25 taps, for k = 4 four each of the 16. For one phase:
//   A (M, K): M = images * H * W output positions, K = taps * C_IN; A(m, t*C_IN + c) = in(i, j, c)
//             at the input pixel of tap t, zero outside the map (gathered on the fly, never stored)
//   B (K, N): N = C_OUT; B(t*C_IN + c, k) = weight[kh][kw][k][c], rearranged once at load time
//             (kernels/phase_weights.hpp)
//   out(pixel of m, k) = relu(scale[k] * (A·B)(m, k) + shift[k])
// where scale and shift fold the convolution's bias and the next inference batch norm.
//
// Every output element is one thread's (or one tensor-core fragment's) sum over K in a fixed order,
// independent of the batch size and of the image's position in the batch: no split-K, no atomics.
// In fp32 that sum is blocked by tap: the C_IN products of each tap run as one FFMA chain from zero
// (tap_sum), and the taps' sums are added into the output's total in tap order. One chain over all of
// K (up to 9 * 512 = 4608 terms in tconv1) let rounding grow with K: on the benchmark's network an
// emulation of these orders on the CPU put the worst image error against float64 at 7.1e-6 (the
// GPU measured 7.0e-6, PyTorch fp32 3.1-3.6e-6), tconv1's chain alone 7.6e-6; with per-tap sums
// 3.4e-6. The cost per output and tap is one FADD and one reset of its tap sum: 2 / C_IN of the
// FFMAs (0.4% in tconv1, 0.8% in tconv2, 1.6% in tconv3).
//
// The projection and the last layer have their own files (kernels/projection.cuh,
// kernels/tconv_output.cuh, kernels/tconv_output_mma.cuh); the sm_90a form of these GEMMs is
// kernels/phase_gemm_wgmma.cuh. Below the kernel: its launchers, the tile shape of each stage and
// the choice between the two shapes.
//
// Four arithmetic flavours share the tile loader (cp.async, three stages):
//   Fp32: float32 FFMA, TM x 8 outputs per thread (TM = 8 or 4), each with its running tap sum.
//   Tf32: mma.sync m16n8k8 tf32, operands already rounded to tf32 in memory.
//   Bf16: mma.sync m16n8k16 bf16, activations and weights stored as bfloat16.
//   Tf32x3: float32 on tensor cores: float32 operands, split into tf32 parts in registers, three
//     mma.sync m16n8k8 per k step into a zeroed accumulator, added into a running tap sum by FADD
//     (kernels/cuda_helpers.cuh, mma_tf32x3_step); the taps' sums added in tap order, as in Fp32.
// Tf32 and Bf16 run 4 warps (2 x 2) of 64 x BN/2 outputs each (4 x 1 of 64 x BN for BM = 256);
// Tf32x3 8 warps of 32 columns and 64 rows or fewer, since each output holds a tap sum beside its
// total. All read their fragments with ldmatrix; B is stored (C_OUT, K), K fastest, so A and B fragments are both plain (non-
// transposed) ldmatrix reads of 16-byte rows. Larger warp tiles read fewer shared-memory bytes per
// multiply (64x64: 128 rows of A and B per 4096 outputs, against 96 per 2048 for 32x64).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include "common/cuda_check.cuh"
#include "common/precision.hpp"
#include "kernels/cuda_helpers.cuh"

namespace facegen {
namespace gpu {

// Taps of parity `parity` along one axis of a k x k kernel (the kh in [0, k) with kh + parity odd),
// the kernel index of tap t, and its input offset (see the file comment).
__host__ __device__ constexpr int phase_taps(int parity, int ksize) { return parity ? (ksize + 1) / 2 : ksize / 2; }
__host__ __device__ constexpr int phase_kernel_index(int parity, int t) { return parity ? 2 * t : 2 * t + 1; }
__host__ __device__ constexpr int phase_offset(int parity, int t) {
  return (parity + 1 - phase_kernel_index(parity, t)) / 2;
}
// blockIdx.z order puts the phase with the most taps (k = 5: 9) first so the longest blocks start first.
__host__ __device__ constexpr int phase_py(int z) { return 1 - z / 2; }
__host__ __device__ constexpr int phase_px(int z) { return 1 - z % 2; }
// Rows of B before phase z (B matrices of the four phases are stored one after another).
__host__ __device__ constexpr int phase_k_offset(int z, int c_in, int ksize) {
  int k = 0;
  for (int q = 0; q < z; ++q) k += phase_taps(phase_py(q), ksize) * phase_taps(phase_px(q), ksize) * c_in;
  return k;
}
// Rows of K of phase z: its taps times c_in.
__host__ __device__ constexpr int phase_k_total(int z, int c_in, int ksize) {
  return phase_taps(phase_py(z), ksize) * phase_taps(phase_px(z), ksize) * c_in;
}

// Tile geometry of one kernel instance. TM: fp32 rows per thread (threads own TM x 8 outputs); the
// tensor-core flavours take TM = 8 only (and do not use it).
template <Math M, int BM_, int BN_, int STAGES_ = 3, int TM_ = 8> struct TileShape {
  static constexpr int BM = BM_;
  static constexpr int BN = BN_;
  static constexpr int kStages = STAGES_;
  static constexpr int TM = TM_;
  static_assert(M == Math::Fp32 ? (TM == 8 || TM == 4) && BM % TM == 0 : TM == 8,
                "fp32 takes TM = 8 or 4 rows per thread, the tensor-core flavours TM = 8");
  using Act = typename MathTypes<M>::Act;
  static constexpr int kElemsPerChunk = 16 / sizeof(Act);    // one cp.async moves 16 bytes
  static constexpr int BK = 128 / sizeof(Act);               // 128-byte rows: 32 floats or 64 bf16
  static constexpr int kChunksPerRow = BK / kElemsPerChunk;  // 8
  static constexpr bool kNK = M != Math::Fp32;  // B stage (BN, BK) k fastest; fp32: (BK, BN) n fastest
  // Tf32, Bf16: 4 warps, 2 x 2 of 64 x BN/2 (BM = 128), or 4 x 1 of 64 x BN (BM = 256). Tf32x3: 8
  // warps, BN / 32 x 32 columns, the rest of the 8 along M (64, 32 or 16 rows each).
  static constexpr int kWarpsN = M == Math::Tf32x3 ? BN / 32 : BM >= 256 ? 1 : 2;
  static constexpr int kWarpsM = M == Math::Tf32x3 ? 8 / kWarpsN : 4 / kWarpsN;
  static constexpr int kThreads = (M == Math::Fp32) ? BM * BN / (TM * 8) : 32 * kWarpsM * kWarpsN;
  // A stage: (BM, BK + 16 bytes) k fastest; rows 144 bytes apart, so the 8 rows of an ldmatrix read
  // fall in 8 different 16-byte bank groups. B stage: (BN, BK + 16 bytes) or fp32 (BK, BN + 8).
  static constexpr int kApitch = BK + kElemsPerChunk;
  static constexpr int kBpitch = kNK ? BK + kElemsPerChunk : BN + 8;
  static constexpr int kAElems = BM * kApitch;
  static constexpr int kBElems = kNK ? BN * kBpitch : BK * kBpitch;
  static constexpr int kStageBytes = (kAElems + kBElems) * static_cast<int>(sizeof(Act));
  static constexpr int kSmemBytes = kStages * kStageBytes;
  static constexpr int kARowsPerThread = BM * kChunksPerRow / kThreads;
  static constexpr int kBChunks = kNK ? BN * kChunksPerRow : BK * BN / 4;
  static constexpr int kBChunksPerThread = kBChunks / kThreads;
  static_assert(kBChunks % kThreads == 0, "B tile chunks must divide among threads");
  static_assert((BM * kChunksPerRow) % kThreads == 0, "A tile chunks must divide among threads");
};

// Blocks per SM that the register budget must allow: the fp32 Small tiles (TM = 4: 32 totals and 32
// tap sums a thread) are held to 128 registers, so that 512 threads can share an SM (two blocks of
// 256, four of 128) as without the tap sums; so are Tf32x3's warps of 16 rows (16 totals and 16 tap
// sums: tconv1's Small tiles), two blocks of 8 warps (its warps of 32 rows spilled at 128 registers
// and take 152, of 64 rows 252); other 128-thread blocks two, 256-thread blocks one.
template <Math M, int BM, int BN, int STAGES, int TM>
constexpr int phase_gemm_min_blocks() {
  using S = TileShape<M, BM, BN, STAGES, TM>;
  if (M == Math::Tf32x3) return BM / S::kWarpsM <= 16 ? 2 : 1;
  return TM == 4 ? 512 / S::kThreads : S::kThreads == 128 ? 2 : 1;
}

// One block's place in the GEMM (phase z, output rows m0.., columns n0..) and this thread's share of
// the A and B tiles it loads. The thread's A rows are (tid / 8) + (NT / 8) * r, always in chunk column
// tid % 8. Row r is output position m = m0 + tid / 8 + (NT / 8) * r, and tap (ty, tx) reads the input
// pixel (dy, dx) away from m's own, so one pointer serves every row and tap: a_row0 (row 0's own
// pixel, at this thread's chunk) + r * (NT / 8) * C_IN + the tap's offset. a_taps holds 6 bits per
// row, 5 rows to a word: bit ty (0-2) says that input row oy + dy of tap row ty lies inside the map,
// bit 3 + tx the same for the column; all clear for rows past m_total, whose pixels are never read.
// (A pointer, a row and a column per A row, and a B address built per chunk, held registers that the
// fp32 kernels need.)
template <Math M, int C_IN, int C_OUT, int H, int BM, int BN, int STAGES, int TM>
struct PhaseBlock {
  using S = TileShape<M, BM, BN, STAGES, TM>;
  using Act = typename S::Act;
  static constexpr int NT = S::kThreads;
  static constexpr int kRowsPerWord = 5;

  int py, px, ntx, k_total, m0, n0, a_chunk;
  const Act* in;
  const Act* a_row0;
  const Act* b_phase;
  const Act* b_thread;  // fp32 B chunk r: row tid / (BN / 4) + r * NT / (BN / 4) of the K tile, columns here
  uint32_t a_taps[(S::kARowsPerThread + kRowsPerWord - 1) / kRowsPerWord] = {};

  __device__ __forceinline__ PhaseBlock(const Act* in_, const Act* weight, int m_total, int ksize) : in(in_) {
    const int tid = threadIdx.x, z = blockIdx.z;
    py = phase_py(z), px = phase_px(z);
    ntx = phase_taps(px, ksize);
    const int nty = phase_taps(py, ksize);
    k_total = nty * ntx * C_IN;
    m0 = blockIdx.x * BM;
    n0 = blockIdx.y * BN;
    a_chunk = tid % S::kChunksPerRow;
    a_row0 = in + static_cast<int64_t>(m0 + tid / S::kChunksPerRow) * C_IN + a_chunk * S::kElemsPerChunk;
#pragma unroll
    for (int r = 0; r < S::kARowsPerThread; ++r) {
      const int m = m0 + tid / S::kChunksPerRow + (NT / S::kChunksPerRow) * r;
      const int oy = (m % (H * H)) / H, ox = m % H;
      uint32_t bits = 0;
#pragma unroll
      for (int t = 0; t < 3; ++t) {
        const int iy = oy + phase_offset(py, t), ix = ox + phase_offset(px, t);
        if (t < nty && iy >= 0 && iy < H) bits |= 1u << t;
        if (t < ntx && ix >= 0 && ix < H) bits |= 8u << t;
      }
      if (m < m_total) a_taps[r / kRowsPerWord] |= bits << (6 * (r % kRowsPerWord));
    }
    b_phase = weight + static_cast<int64_t>(phase_k_offset(z, C_IN, ksize)) * C_OUT;
    b_thread = b_phase + static_cast<int64_t>(tid / (BN / 4)) * C_OUT + n0 + (tid % (BN / 4)) * 4;
  }

  // Load: K tile kt's A (gathered, zeros outside the map) and B into pipeline stage `stage`, issued as
  // cp.async, not awaited.
  __device__ __forceinline__ void load_tile(Act* smem, int stage, int kt) const {
    const int tid = threadIdx.x;
    Act* As = smem + stage * (S::kAElems + S::kBElems);
    Act* Bs = As + S::kAElems;
    const int k0 = kt * S::BK;
    const int tap = k0 / C_IN, c0 = k0 % C_IN;
    const int ty = tap / ntx, tx = tap % ntx;
    const int offset = (phase_offset(py, ty) * H + phase_offset(px, tx)) * C_IN + c0;
#pragma unroll
    for (int r = 0; r < S::kARowsPerThread; ++r) {
      const uint32_t bits = a_taps[r / kRowsPerWord] >> (6 * (r % kRowsPerWord));
      const bool valid = (bits >> ty) & (bits >> (3 + tx)) & 1u;
      const Act* src = valid ? a_row0 + (NT / S::kChunksPerRow) * r * C_IN + offset : in;
      int row = tid / S::kChunksPerRow + (NT / S::kChunksPerRow) * r;
      cp_async16(As + row * S::kApitch + a_chunk * S::kElemsPerChunk, src, valid);
    }
#pragma unroll
    for (int r = 0; r < S::kBChunksPerThread; ++r) {
      int q = tid + NT * r;
      if constexpr (S::kNK) {  // B stored (C_OUT, k_total) per phase, k fastest
        int nrow = q / S::kChunksPerRow, ch = q % S::kChunksPerRow;
        const Act* src = b_phase + static_cast<int64_t>(n0 + nrow) * k_total + k0 + ch * S::kElemsPerChunk;
        cp_async16(Bs + nrow * S::kBpitch + ch * S::kElemsPerChunk, src, true);
      } else {  // B stored (k_total, C_OUT) per phase, n fastest
        int krow = q / (BN / 4), ch = q % (BN / 4);
        const Act* src = b_thread + static_cast<int64_t>(k0 + (NT / (BN / 4)) * r) * C_OUT;
        cp_async16(Bs + krow * S::kBpitch + ch * 4, src, true);
      }
    }
  }
};

// Each thread's outputs and their accumulators. Tensor-core flavours: warp (warp_m, warp_n) owns a
// WM x WN tile as MI x NI mma fragments of 16 x 8; fp32: thread (tx, ty) owns rows ty + TY * i
// (i < TM) and columns tx * 4 + j, BN / 2 + tx * 4 + j (j < 4), with a running sum per tap beside
// each total.
template <Math M, int C_IN, int BM, int BN, int STAGES, int TM>
struct PhaseAccumulators {
  using S = TileShape<M, BM, BN, STAGES, TM>;
  using Act = typename S::Act;
  static constexpr int WM = BM / S::kWarpsM;  // tensor-core flavours: warp tile WM x WN
  static constexpr int WN = BN / S::kWarpsN;
  static constexpr int MI = WM / 16;
  static constexpr int NI = WN / 8;
  static_assert(M == Math::Fp32 || (WM % 16 == 0 && NI % 2 == 0), "warp tile must be whole ldmatrix blocks");
  static constexpr int kAccs = (M == Math::Fp32) ? TM * 8 : MI * NI * 4;
  // fp32 (Fp32, Tf32x3): the current tap's products go into tap_sum, from zero per output and tap (one
  // FFMA chain, or the k steps' fresh sums), which joins acc after the tap's last K tile (end_k_tile).
  // A K tile never straddles two taps.
  static constexpr bool kTapSummed = M == Math::Fp32 || M == Math::Tf32x3;
  static constexpr int kTapSums = kTapSummed ? kAccs : 1;
  static constexpr int kTilesPerTap = C_IN / S::BK;
  static constexpr int TX = BN / 8;   // fp32: threads along n
  static constexpr int TY = BM / TM;  // fp32: threads along m
  static constexpr int kHalfK = 16 / static_cast<int>(sizeof(Act));  // elements in 16 bytes: 8 bf16, 4 tf32

  float acc[kAccs];
  float tap_sum[kTapSums];
  int lane, warp_m, warp_n, g, t4, tx, ty;
  // ldmatrix row addresses of this lane (in elements, within a stage). A x4: matrices (rows 0-7 | 8-15)
  // x (k half 0 | 1) of a 16-row block. B x4: (n block ni: k half 0 | 1, n block ni + 1: k half 0 | 1).
  int a_ld, b_ld;

  __device__ __forceinline__ PhaseAccumulators() {
    const int tid = threadIdx.x;
#pragma unroll
    for (int i = 0; i < kAccs; ++i) acc[i] = 0.f;
#pragma unroll
    for (int i = 0; i < kTapSums; ++i) tap_sum[i] = 0.f;
    lane = tid % 32;
    const int warp = tid / 32;
    g = lane / 4, t4 = lane % 4;
    warp_m = warp % S::kWarpsM, warp_n = warp / S::kWarpsM;
    tx = tid % TX, ty = tid / TX;
    a_ld = (warp_m * WM + lane % 16) * S::kApitch + (lane / 16) * kHalfK;
    b_ld = (warp_n * WN + lane % 8 + (lane / 16) * 8) * S::kBpitch + ((lane / 8) % 2) * kHalfK;
  }

  // Multiply: one K tile of the stage's A and B into the accumulators (Fp32, Tf32x3: into the tap sums).
  __device__ __forceinline__ void multiply_tile(const Act* smem, int stage) {
    const Act* As = smem + stage * (S::kAElems + S::kBElems);
    const Act* Bs = As + S::kAElems;
    if constexpr (M == Math::Fp32) ffma_k_tile<BM, BN, S::BK, TM, S::kApitch, S::kBpitch>(As, Bs, tx, ty, tap_sum);
    else if constexpr (M == Math::Tf32x3) mma_tf32x3_k_tile<MI, NI, S::BK, S::kApitch, S::kBpitch>(As, Bs, a_ld, b_ld, tap_sum);
    else mma_k_tile<M, MI, NI, S::BK, S::kApitch, S::kBpitch>(As, Bs, a_ld, b_ld, acc);
  }

  // After K tile kt: in Fp32 and Tf32x3, at a tap's last K tile, its sums join the totals.
  __device__ __forceinline__ void end_k_tile(int kt) {
    if constexpr (kTapSummed) {
      if ((kt + 1) % kTilesPerTap == 0) {
#pragma unroll
        for (int i = 0; i < kAccs; ++i) {
          acc[i] += tap_sum[i];
          tap_sum[i] = 0.f;
        }
      }
    }
  }
};

// Epilogue: relu(scale * acc + shift) into the phase's output pixels.
template <Math M, int C_IN, int C_OUT, int H, int BM, int BN, int STAGES, int TM>
__device__ __forceinline__ void phase_store_outputs(const PhaseBlock<M, C_IN, C_OUT, H, BM, BN, STAGES, TM>& blk,
                                                    const PhaseAccumulators<M, C_IN, BM, BN, STAGES, TM>& t,
                                                    const float* __restrict__ scale, const float* __restrict__ shift,
                                                    typename MathTypes<M>::Act* __restrict__ out, int m_total) {
  using Act = typename MathTypes<M>::Act;
  using T = PhaseAccumulators<M, C_IN, BM, BN, STAGES, TM>;
  const int m0 = blk.m0, n0 = blk.n0, py = blk.py, px = blk.px;
  auto out_ptr = [&](int m) -> Act* {
    int img = m / (H * H), pix = m % (H * H);
    int oy = pix / H, ox = pix % H;
    int64_t p = (static_cast<int64_t>(img) * 2 * H + 2 * oy + py) * 2 * H + 2 * ox + px;
    return out + p * C_OUT;
  };
  if constexpr (M == Math::Fp32) {
    float sc[8], sh[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      int n = n0 + (j / 4) * (BN / 2) + t.tx * 4 + j % 4;
      sc[j] = scale[n];
      sh[j] = shift[n];
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      int m = m0 + t.ty + T::TY * i;
      if (m >= m_total) continue;
      float* o = out_ptr(m) + n0 + t.tx * 4;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = fmaxf(fmaf(t.acc[i * 8 + h * 4 + j], sc[h * 4 + j], sh[h * 4 + j]), 0.f);
        Store<M>::four(o + h * (BN / 2), make_float4(v[0], v[1], v[2], v[3]));
      }
    }
  } else {
#pragma unroll
    for (int mi = 0; mi < T::MI; ++mi) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        int m = m0 + t.warp_m * T::WM + mi * 16 + t.g + half * 8;
        if (m >= m_total) continue;
        Act* o = out_ptr(m);
#pragma unroll
        for (int ni = 0; ni < T::NI; ++ni) {
          int n = n0 + t.warp_n * T::WN + ni * 8 + 2 * t.t4;
          const float* c = t.acc + (mi * T::NI + ni) * 4 + half * 2;
          float v0 = fmaxf(fmaf(c[0], scale[n], shift[n]), 0.f);
          float v1 = fmaxf(fmaf(c[1], scale[n + 1], shift[n + 1]), 0.f);
          Store<M>::two(o + n, v0, v1);
        }
      }
    }
  }
}

template <Math M, int C_IN, int C_OUT, int H, int BM, int BN, int STAGES = 3, int TM = 8>
__global__ void __launch_bounds__(TileShape<M, BM, BN, STAGES, TM>::kThreads,
                                  phase_gemm_min_blocks<M, BM, BN, STAGES, TM>())
tconv_phase_gemm(const typename MathTypes<M>::Act* __restrict__ in,  // (n, H, H, C_IN)
                 const typename MathTypes<M>::Act* __restrict__ weight,  // four phases' B, see above
                 const float* __restrict__ scale, const float* __restrict__ shift,  // (C_OUT)
                 typename MathTypes<M>::Act* __restrict__ out,  // (n, 2H, 2H, C_OUT)
                 int m_total,                                    // n * H * H
                 int ksize) {                                    // 4 or 5
  using S = TileShape<M, BM, BN, STAGES, TM>;
  using Act = typename S::Act;
  static_assert(C_IN % S::BK == 0, "a K tile must stay inside one tap");
  static_assert(C_OUT % BN == 0, "N tiles must cover C_OUT exactly");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Act* smem = reinterpret_cast<Act*>(smem_raw);

  const PhaseBlock<M, C_IN, C_OUT, H, BM, BN, STAGES, TM> blk(in, weight, m_total, ksize);
  PhaseAccumulators<M, C_IN, BM, BN, STAGES, TM> t;
  const int num_k_tiles = blk.k_total / S::BK;

  // Three-stage cp.async pipeline: tiles kt+1 and kt+2 load while tile kt is multiplied.
#pragma unroll
  for (int s = 0; s < S::kStages - 1; ++s) {
    if (s < num_k_tiles) blk.load_tile(smem, s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < num_k_tiles; ++kt) {
    cp_async_wait<S::kStages - 2>();
    __syncthreads();
    int next = kt + S::kStages - 1;
    if (next < num_k_tiles) blk.load_tile(smem, next % S::kStages, next);
    cp_async_commit();
    t.multiply_tile(smem, kt % S::kStages);
    t.end_k_tile(kt);
  }
  cp_async_wait<0>();
  phase_store_outputs(blk, t, scale, shift, out, m_total);
}

// The launchers. Tile shapes per stage, two per stage: Large for batches that fill the GPU, Small (half the
// columns per block, so twice the blocks) for batches whose Large grid would leave SMs idle
// (DeviceNetwork::tconv picks). The tile shape only decides which threads compute which outputs:
// every output is the same sequence of multiply-adds over K in the same order (in fp32 one FFMA chain
// per tap, or in Tf32x3 the k steps' fresh sums added into one per tap, BK = 32 for every shape, then
// the taps' sums in tap order; the same mma.sync steps in tf32/bf16), so both give the same bits and an image never
// depends on the batch size (the GPU tests compare batches 1, 3, 127, 1000 and 8192 byte for byte).
// fp32 Small: TM = 4 rows per thread, 4 x 8 outputs (TM = 8 everywhere else), in blocks of 128 x 64
// (256 threads), and 64 x 64 (128 threads) for tconv1. At 64 images tconv1's K is up to 4608 and its
// 8 x 8 threads' FFMA chains were the critical path (128 x 64 x TM 8: 0.458 ms; x TM 4: 0.292 ms);
// 64 x 64 blocks spread the 9-tap phase's rows over twice the SMs. Each output keeps the same FFMA
// sequence over K, so the bits do not change. Their threads are held to 128 registers
// (phase_gemm_min_blocks), so that two 256-thread or four 128-thread blocks share an SM where shared
// memory allows it (sm_90: 227 KB; sm_80's 164 KB hold one 83 KB block of 256 threads).
// tconv3 (stage 2, C_OUT = 64) Large in the tensor-core flavours: blocks of 256 x 64 as 4 warps of
// 64 x 64 (the 128 x 64 blocks' 64 x 32 warp tiles read a third more shared memory per multiply), two
// stages so that two blocks (8 warps) still fit in an SM's shared memory (2 x 92 KB).
// Tf32x3: blocks of 8 warps, Large 128 x 128 (tconv3: 256 x 64) in warps of 64 x 32 (64 totals and 64
// tap sums a thread: 252 registers, one block an SM), Small 128 x 64 in warps of 32 x 32 (tconv1: 64 x
// 64, as fp32's, in warps of 16 x 32); three stages everywhere.
template <Math M, int S, bool Small> struct PhaseGemmStage;
template <Math M, bool Small> struct PhaseGemmStage<M, 0, Small> {
  static constexpr bool kHalfRows = (M == Math::Fp32 || M == Math::Tf32x3) && Small;
  static constexpr int C_IN = 512, C_OUT = 256, H = 4, BM = kHalfRows ? 64 : 128, BN = Small ? 64 : 128, STAGES = 3;
  static constexpr int TM = M == Math::Fp32 && Small ? 4 : 8;
};
template <Math M, bool Small> struct PhaseGemmStage<M, 1, Small> {
  static constexpr int C_IN = 256, C_OUT = 128, H = 8, BM = 128, BN = Small ? 64 : 128, STAGES = 3;
  static constexpr int TM = M == Math::Fp32 && Small ? 4 : 8;
};
template <Math M, bool Small> struct PhaseGemmStage<M, 2, Small> {
  static constexpr bool kWide = M != Math::Fp32 && !Small;
  static constexpr int C_IN = 128, C_OUT = 64, H = 16, BM = kWide ? 256 : 128, BN = 64;
  static constexpr int STAGES = kWide && M != Math::Tf32x3 ? 2 : 3;
  static constexpr int TM = M == Math::Fp32 && Small ? 4 : 8;
};

template <Math M, int S, bool Small>
void configure_phase_gemm() {
  using C = PhaseGemmStage<M, S, Small>;
  using Shape = TileShape<M, C::BM, C::BN, C::STAGES, C::TM>;
  CUDA_CHECK(cudaFuncSetAttribute(tconv_phase_gemm<M, C::C_IN, C::C_OUT, C::H, C::BM, C::BN, C::STAGES, C::TM>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, Shape::kSmemBytes));
}

// Blocks of the stage's grid for n images.
template <Math M, int S, bool Small>
int64_t phase_gemm_blocks(int n) {
  using C = PhaseGemmStage<M, S, Small>;
  return (int64_t{n} * C::H * C::H + C::BM - 1) / C::BM * (C::C_OUT / C::BN) * 4;
}

template <Math M, int S, bool Small>
void launch_phase_gemm(const void* in, int n, int ksize, const void* weight, const float* scale, const float* shift,
                       void* out, cudaStream_t stream) {
  using C = PhaseGemmStage<M, S, Small>;
  using Shape = TileShape<M, C::BM, C::BN, C::STAGES, C::TM>;
  using Act = typename MathTypes<M>::Act;
  const int m_total = n * C::H * C::H;
  dim3 grid((m_total + C::BM - 1) / C::BM, C::C_OUT / C::BN, 4);
  tconv_phase_gemm<M, C::C_IN, C::C_OUT, C::H, C::BM, C::BN, C::STAGES, C::TM>
      <<<grid, Shape::kThreads, Shape::kSmemBytes, stream>>>(
          static_cast<const Act*>(in), static_cast<const Act*>(weight), scale, shift,
          static_cast<Act*>(out), m_total, ksize);
  CUDA_CHECK_LAUNCH();
}

// Small tiles when the Large grid would not give every SM two blocks (the Large tensor-core tiles
// fit two per SM): at 64 images, tconv1's Large grid is 64 blocks for 132 SMs.
// tiles: 0 picks by the grid as above; 1 forces Small, 2 Large (FACEGEN_GPU_TILES, for the
// sanitizer runs that must see both shapes at a few images).
template <Math M, int S>
void launch_phase_gemm_for(int n, int ksize, int sm_count, int tiles, const void* in, const void* weight,
                           const float* scale, const float* shift, void* out, cudaStream_t stream) {
  const bool small = tiles == 0 ? phase_gemm_blocks<M, S, false>(n) < 2 * int64_t{sm_count} : tiles == 1;
  if (small)
    launch_phase_gemm<M, S, true>(in, n, ksize, weight, scale, shift, out, stream);
  else
    launch_phase_gemm<M, S, false>(in, n, ksize, weight, scale, shift, out, stream);
}

template <Math M>
void launch_tconv_phase_gemm(int stage, int ksize, int sm_count, int tiles, const void* in, int n, const void* weight,
                             const float* scale, const float* shift, void* out, cudaStream_t stream) {
  if (ksize != 4 && ksize != 5) throw std::logic_error("the phase GEMMs take kernel size 4 or 5");
  switch (stage) {
    case 0: launch_phase_gemm_for<M, 0>(n, ksize, sm_count, tiles, in, weight, scale, shift, out, stream); break;
    case 1: launch_phase_gemm_for<M, 1>(n, ksize, sm_count, tiles, in, weight, scale, shift, out, stream); break;
    case 2: launch_phase_gemm_for<M, 2>(n, ksize, sm_count, tiles, in, weight, scale, shift, out, stream); break;
    default: throw std::logic_error("tconv stage must be 0, 1 or 2");
  }
}

template <Math M>
void configure_phase_gemms() {
  configure_phase_gemm<M, 0, false>();
  configure_phase_gemm<M, 1, false>();
  configure_phase_gemm<M, 2, false>();
  configure_phase_gemm<M, 0, true>();
  configure_phase_gemm<M, 1, true>();
  configure_phase_gemm<M, 2, true>();
}

}  // namespace gpu
}  // namespace facegen
