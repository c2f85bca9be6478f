// phase_gemm_wgmma_tf32x3.cuh: the phase GEMMs of tconv1-3 in float32 on Hopper's tensor cores
// (sm_90a, --precision fp32 on tensor cores): three tf32 products per term on wgmma, each k step's
// products from zero, added into the output's sum for its tap in round-to-nearest float32, the taps'
// sums added in tap order. That is the mma.sync kernels' order step for step (kernels/cuda_helpers.cuh,
// mma_tf32x3_step; kernels/phase_gemm.cuh), so both give the same sums.
//
// Operands. A is the activations (n, H, H, C_IN), plain float32 as the FFMA kernels store them; B the
// weights, split once at load time into their tf32 parts (kernels/phase_weights.hpp,
// phase_b_split_matrices): per phase a (2 C_OUT, K) matrix, K fastest, hi = tf32(w) in rows 0..C_OUT-1,
// lo = tf32(w - hi) in rows C_OUT..2 C_OUT-1. The producer (one thread of warpgroup 0) brings each
// stage the activation box and both weight boxes (produce_tiles, kernels/phase_gemm_wgmma.cuh, with
// the tensor maps of the tf32 row tiles). Each consumer warpgroup (1..CONSUMERS) owns 64 rows x BN
// columns. Per k step (8 of K) it loads its rows' A fragment from the stage with ldmatrix, splits it
// in registers (hi = tf32(x), lo = tf32(x - hi), split_tf32), and issues wgmma with A from registers
// (WgmmaRs, kernels/hopper.cuh) and B, the weights' parts, from shared memory.
//
// One k step of one slice of the warpgroup's columns (kSliceN of them) is a group:
//   fresh  = lo(x) hi(w)                 wgmma, scale-d 0: fresh's old value is not read
//   fresh += hi(x) lo(w)                 wgmma
//   fresh += hi(x) hi(w)                 wgmma                (lo(x) lo(w), 2^-22 of a product, dropped)
//   commit; once complete: tap += fresh  FADD, round to nearest
// and after a tap's last k step total += tap, tap = 0. The tensor cores truncate toward zero when they
// add into their accumulator (bench/mma_rounding.cuh measured it); starting every k step's three
// products from zero and adding them by FADD keeps float32 FFMA's accuracy (bench/split_products.cpp,
// rows "wgmma R1" and "fresh/step taps"; docs/gpu.md). REBASE = 2 (schedule 2, for the benchmark)
// makes a group of two k steps, six wgmmas before the FADD: half the FADDs and waits, other sums
// (emulated as "wgmma R2").
//
// Schedule. With two slices the groups alternate between them: slice 1's three wgmmas run while slice
// 0's FADDs take its previous step's result (wgmma_wait<1>), and the other way round, so that a
// warpgroup keeps the tensor cores fed by itself; at the end of a K tile it waits for all its groups
// (ptxas serializes every wgmma of a kernel that reads an accumulator across the loop's back edge
// while its wgmma may still run). With one slice every group waits for its own wgmmas
// (wgmma_wait<0>) and the SM's other warpgroups fill the gap. Either way the same groups run in the
// same order for every output: the bits do not depend on the slices (they do on REBASE).
// Registers a thread: fresh and tap for its BN / 2 outputs, and two steps' A parts (16); the totals
// are kept in shared memory (each thread's own words, conflict-free), touched once a tap: a third set
// of BN / 2 registers would leave no room for two warpgroups of BN = 128 on an SM. ptxas gives every
// warpgroup of a block the same registers, so with two or more consumers the producer's warpgroup
// hands most of its share to them (setmaxnreg; WgmmaTf32x3Shape::kConsumerRegs): 232 a thread for
// two consumers of 128 columns, where one launch share would be 168.
//
// Every output is one fixed sequence of operations over K in ascending order, whatever the block's
// position, the batch size, the number of consumer warpgroups or the schedule: the bits do not
// depend on the batch.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda_helpers.cuh"
#include "kernels/hopper.cuh"
#include "kernels/phase_gemm.cuh"
#include "kernels/phase_gemm_wgmma.cuh"

namespace facegen {
namespace gpu {

// The row tiles' shape in Tf32x3 (WgmmaShape: two weight boxes a stage and the totals; warpgroup 0
// the producer), the columns of one wgmma (BN / SLICE_N slices a warpgroup), and the registers.
template <int C_IN, int C_OUT, int H, int BN, int CONSUMERS, int STAGES, int SLICE_N, int REBASE>
struct WgmmaTf32x3Shape : WgmmaShape<Math::Tf32x3, C_IN, C_OUT, H, BN, CONSUMERS, STAGES> {
  static constexpr int kSliceN = SLICE_N;
  static constexpr int kSlices = BN / SLICE_N;
  static constexpr int kSliceRegs = SLICE_N / 2;        // accumulators of one slice a thread
  static constexpr int kSteps = 128 / 4 / 8;            // k steps of a K tile (BK = 32 floats)
  static constexpr int kRebase = REBASE;                // k steps a group: one FADD per kRebase steps
  static constexpr int kGroups = kSteps / REBASE;       // groups of a slice a K tile
  static constexpr int kTilesPerTap = C_IN / 32;
  // Registers a thread at launch (the register file's 64K shared by the block's warpgroups, in steps
  // of 8), and with more than one consumer after setmaxnreg: the producer's warpgroup keeps
  // kProducerRegs, the consumers share out the rest of the block's registers.
  static constexpr int kLaunchRegs = (65536 / (128 * (CONSUMERS + 1))) / 8 * 8 < 255 ? (65536 / (128 * (CONSUMERS + 1))) / 8 * 8 : 255;
  static constexpr bool kReallocates = CONSUMERS > 1;
  static constexpr int kProducerRegs = CONSUMERS > 2 ? 24 : 40;
  static constexpr int kConsumerRegs = kLaunchRegs + (kLaunchRegs - kProducerRegs) / CONSUMERS / 8 * 8;
  static_assert(!kReallocates || (128 * kProducerRegs + 128 * CONSUMERS * kConsumerRegs <= 128 * (CONSUMERS + 1) * kLaunchRegs &&
                                  kConsumerRegs <= 256),
                "the consumers take no more registers than the producer gives back");
  static_assert(kSlices == 1 || kSlices == 2, "one or two slices a warpgroup");
  static_assert(REBASE == 1 || REBASE == 2, "an FADD every k step, or every two");
  static_assert(SLICE_N == 32 || SLICE_N == 64 || SLICE_N == 128, "the register-A wgmma forms compiled (WgmmaRs)");
  static_assert(C_IN % 32 == 0, "a K tile never straddles two taps");
};

#if FACEGEN_WGMMA_ENABLED
// One k step's A fragment of this warp's 16 rows, split into tf32 parts.
struct SplitFragment {
  uint32_t hi[4], lo[4];
};
// A group's fragments: its R k steps'.
template <int R>
struct GroupFragments {
  SplitFragment step[R];
};

// k step ks of a 128-byte-swizzled stage of activation rows (`rows`: the warpgroup's 64, 1024-byte
// aligned) by ldmatrix: lane l reads row 16 warp + l % 16 at the 16-byte chunk 2 ks + l / 16 of its
// 128 bytes, which the swizzle put at chunk (2 ks + l / 16) ^ (row % 8), and row % 8 = l % 8. The 8
// rows of each of ldmatrix's four matrices fall in 8 distinct chunks: no bank conflict.
__device__ __forceinline__ void load_split_fragment(const unsigned char* rows, int ks, SplitFragment& f) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  const unsigned char* p = rows + (16 * warp + lane % 16) * 128 + (((2 * ks + lane / 16) ^ (lane % 8)) << 4);
  uint32_t x[4];
  ldmatrix_x4(x, p);
#pragma unroll
  for (int r = 0; r < 4; ++r) split_tf32(x[r], f.hi[r], f.lo[r]);
}

// A consumer thread's sums: per slice the current group's fresh accumulators and the tap's sum, in
// wgmma's accumulator layout (slice s covers columns s * kSliceN..); the totals in shared memory,
// word (s * kSliceRegs + i) * kConsumerThreads + thread.
template <class S>
struct Tf32x3Sums {
  float fresh[S::kSlices][S::kSliceRegs];
  float tap[S::kSlices][S::kSliceRegs];
  float* totals;

  // consumer_thread: 0..kConsumerThreads-1, the thread's place among the consumer warpgroups.
  __device__ __forceinline__ Tf32x3Sums(float* totals_base, int consumer_thread) : totals(totals_base + consumer_thread) {
#pragma unroll
    for (int s = 0; s < S::kSlices; ++s)
#pragma unroll
      for (int i = 0; i < S::kSliceRegs; ++i) {
        fresh[s][i] = 0.f;  // never read (the first wgmma of a group ignores it); defined for the compiler
        tap[s][i] = 0.f;
        totals[(s * S::kSliceRegs + i) * S::kConsumerThreads] = 0.f;
      }
  }

  // The group of slice s has completed (the caller waited): tap += fresh, and at a tap's end
  // total += tap, tap = 0. a: that group's A parts, kept alive until here (operand_fence).
  __device__ __forceinline__ void fold(int s, bool tap_end, GroupFragments<S::kRebase>& a) {
#pragma unroll
    for (int k = 0; k < S::kRebase; ++k)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        operand_fence(a.step[k].hi[r]);
        operand_fence(a.step[k].lo[r]);
      }
#pragma unroll
    for (int i = 0; i < S::kSliceRegs; ++i) {
      accumulator_fence(fresh[s][i]);
      tap[s][i] += fresh[s][i];
    }
    if (tap_end) {
#pragma unroll
      for (int i = 0; i < S::kSliceRegs; ++i) {
        float& t = totals[(s * S::kSliceRegs + i) * S::kConsumerThreads];
        t += tap[s][i];
        tap[s][i] = 0.f;
      }
    }
  }

  // The totals, in wgmma's accumulator layout over the warpgroup's BN columns (store_outputs).
  __device__ __forceinline__ void read_totals(float (&acc)[S::BN / 2]) const {
#pragma unroll
    for (int i = 0; i < S::BN / 2; ++i) acc[i] = totals[i * S::kConsumerThreads];
  }
};

// Group g of slice s: k steps R g .. R g + R - 1 of the stage's K tile, three products each, the first
// from scale-d 0; A parts a, the weights' parts at descriptors w_hi and w_lo; committed.
template <class S>
__device__ __forceinline__ void issue_group(Tf32x3Sums<S>& t, int s, int g, const GroupFragments<S::kRebase>& a,
                                            uint64_t w_hi, uint64_t w_lo) {
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < S::kRebase; ++k) {
    const uint32_t at = 32 * (S::kRebase * g + k) + s * S::kSliceN * 128;  // the k step in the rows, the slice's rows
    WgmmaRs<S::kSliceN>::mma(t.fresh[s], a.step[k].lo, descriptor_advance(w_hi, at), k == 0 ? 0 : 1);
    WgmmaRs<S::kSliceN>::mma(t.fresh[s], a.step[k].hi, descriptor_advance(w_lo, at), 1);
    WgmmaRs<S::kSliceN>::mma(t.fresh[s], a.step[k].hi, descriptor_advance(w_hi, at), 1);
  }
  wgmma_commit();
}

// Group g's A fragments (its R k steps) from the stage's rows.
template <class S>
__device__ __forceinline__ void load_group_fragments(const unsigned char* rows, int g, GroupFragments<S::kRebase>& f) {
#pragma unroll
  for (int k = 0; k < S::kRebase; ++k) load_split_fragment(rows, S::kRebase * g + k, f.step[k]);
}

// Consumer: this warpgroup's 64 x BN sums over all K tiles (see the file comment for the groups' order).
// Stage kt is given back (every consumer thread arrives on empty) at the end of tile kt, once all its
// groups have completed.
template <class S>
__device__ __forceinline__ void multiply_tiles_tf32x3(Tf32x3Sums<S>& t, const unsigned char* tiles, uint64_t* full,
                                                      uint64_t* empty, int num_k_tiles, int consumer) {
  GroupFragments<S::kRebase> frag[2];
  for (int kt = 0; kt < num_k_tiles; ++kt) {
    const int stage = kt % S::kStages;
    barrier_wait(&full[stage], (kt / S::kStages) & 1);
    const unsigned char* base = tiles + stage * S::kStageBytes;
    const unsigned char* rows = base + S::kActOffset + consumer * S::kConsumerABytes;
    const uint64_t w_hi = sw128_descriptor(smem_address(base + S::kWeightOffset));
    const uint64_t w_lo = sw128_descriptor(smem_address(base + S::kWeightOffset + S::kBBytes));
    const bool tap_end = (kt + 1) % S::kTilesPerTap == 0;
    load_group_fragments<S>(rows, 0, frag[0]);
#pragma unroll
    for (int g = 0; g < S::kGroups; ++g) {
      GroupFragments<S::kRebase>& a = frag[g % 2];
      GroupFragments<S::kRebase>& next = frag[(g + 1) % 2];  // group g + 1's parts, loaded while g's wgmmas run
      const bool last = g == S::kGroups - 1;
      if constexpr (S::kSlices == 1) {
        issue_group(t, 0, g, a, w_hi, w_lo);
        if (!last) load_group_fragments<S>(rows, g + 1, next);
        wgmma_wait<0>();
        t.fold(0, last && tap_end, a);
      } else {
        issue_group(t, 0, g, a, w_hi, w_lo);
        if (g > 0) {  // slice 1 of group g - 1 has completed, and with it every use of `next`'s registers
          wgmma_wait<1>();
          t.fold(1, false, next);
        }
        issue_group(t, 1, g, a, w_hi, w_lo);
        if (!last) load_group_fragments<S>(rows, g + 1, next);
        wgmma_wait<1>();  // slice 0 of group g has completed
        t.fold(0, last && tap_end, a);
      }
    }
    if constexpr (S::kSlices == 2) {  // the tile's last group
      wgmma_wait<0>();
      t.fold(1, tap_end, frag[(S::kGroups - 1) % 2]);
    }
    barrier_arrive(&empty[stage]);
  }
}
#endif  // FACEGEN_WGMMA_ENABLED

// act (n, H, H, C_IN) float32 -> out (n, 2H, 2H, C_OUT) float32: relu(scale * tconv + shift), one phase per
// blockIdx.z, BM = 64 * CONSUMERS rows and BN columns per block.
template <int C_IN, int C_OUT, int H, int BN, int CONSUMERS, int STAGES, int SLICE_N, int REBASE>
__global__ void __launch_bounds__(128 * (CONSUMERS + 1), 1)
tconv_phase_wgmma_tf32x3(const __grid_constant__ WgmmaMaps maps,  // A: in (n, H, H, C_IN); B: four phases' (2 C_OUT, K)
                         const float* __restrict__ scale, const float* __restrict__ shift,  // (C_OUT)
                         float* __restrict__ out,                                          // (n, 2H, 2H, C_OUT)
                         int m_total,                                                      // n * H * H
                         int ksize) {                                                      // 4 or 5
#if FACEGEN_WGMMA_ENABLED
  using S = WgmmaTf32x3Shape<C_IN, C_OUT, H, BN, CONSUMERS, STAGES, SLICE_N, REBASE>;
  extern __shared__ unsigned char wgmma_smem[];
  unsigned char* tiles = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(wgmma_smem) + 1023) & ~uintptr_t{1023});
  uint64_t* full = reinterpret_cast<uint64_t*>(tiles + S::kStages * S::kStageBytes);
  uint64_t* empty = full + S::kStages;
  const int z = blockIdx.z, py = phase_py(z), px = phase_px(z);
  const int num_k_tiles = phase_k_total(z, C_IN, ksize) / S::BK;
  const int m0 = blockIdx.x * S::BM, n0 = blockIdx.y * BN;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S::kStages; ++s) {
      barrier_init(&full[s], 1);
      barrier_init(&empty[s], S::kConsumerThreads);
    }
    barrier_init_fence();
  }
  __syncthreads();
  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    if constexpr (S::kReallocates) warpgroup_registers_release<S::kProducerRegs>();
    if (threadIdx.x == 0) {
      const CUtensorMap* b_map = z == 0 ? &maps.b[0] : z == 1 ? &maps.b[1] : z == 2 ? &maps.b[2] : &maps.b[3];
      produce_tiles<S, C_IN, H>(maps, b_map, tiles, full, empty, num_k_tiles, ksize, py, px, m0, n0);
    }
  } else {
    if constexpr (S::kReallocates) warpgroup_registers_claim<S::kConsumerRegs>();
    const int consumer = warpgroup - 1;
    Tf32x3Sums<S> sums(reinterpret_cast<float*>(tiles + S::kTotalsOffset), threadIdx.x - 128);
    multiply_tiles_tf32x3<S>(sums, tiles, full, empty, num_k_tiles, consumer);
    float acc[BN / 2];
    sums.read_totals(acc);
    store_outputs<S, Math::Tf32x3, C_OUT, H>(acc, scale, shift, out, m_total, m0 + 64 * consumer, n0, py, px);
  }
#endif
}

}  // namespace gpu
}  // namespace facegen
