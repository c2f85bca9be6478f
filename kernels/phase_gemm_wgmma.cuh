// phase_gemm_wgmma.cuh: the phase GEMMs of kernels/phase_gemm.cuh on Hopper's tensor cores (sm_90a):
// wgmma fed by bulk tensor copies (TMA) through an mbarrier ring, one producer warpgroup and one or
// two consumer warpgroups per block. Same GEMMs, same phase decomposition (no multiply on an
// inserted zero), same epilogue relu(scale * acc + shift); tf32 and bf16.
//
// A (M, K) of phase (py, px), K tile k0 = tap t, channels c0..c0+BK-1: for the block's rows
// m0..m0+BM-1 (whole images, or whole rows of one image) it is the box
//   in[img0 .. img0+I-1][oy0+dy .. oy0+dy+R-1][dx .. dx+H-1][c0 .. c0+BK-1]   (input (n, H, H, C_IN))
// of the 4-D tensor map over the input, with (dy, dx) the tap's offset: coordinates outside the map
// (-1, H, or an image past n) read as zeros, which is exactly the transposed convolution's border and
// the batch's tail. The box lands in shared memory as BM rows of BK values, row m - m0, K fastest:
// the K-major tile wgmma reads. B (C_OUT, K) of the phase is a 2-D map, box (BN rows, BK).
//
// Warpgroup 0 is the producer: one thread waits for a free stage, arms its barrier with the tile's
// bytes and issues the two copies. Warpgroups 1..CONSUMERS each own 64 rows x BN columns: they wait
// for a full stage, issue BK / K_STEP wgmma steps, and free the stage once those have completed
// (the next tile's wgmmas are in flight meanwhile).
//
// Every output is one accumulator chain over K in ascending order, the same wgmma steps whatever the
// block's position, the batch size or the number of consumer warpgroups (the Small shape has one,
// the Large two, with the same m64 x BN instruction): the bits do not depend on the batch.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/hopper.cuh"
#include "kernels/phase_gemm.cuh"

namespace facegen {
namespace gpu {

// Tensor maps of one launch: A over the input activations, B over each phase's weights.
struct WgmmaMaps {
  CUtensorMap a;
  CUtensorMap b[4];
};

// Tf32x3 (float32 on tensor cores, kernels/phase_gemm_wgmma_tf32x3.cuh) differs in two places: its
// weights come as two boxes per stage, the tf32 parts hi and lo (rows n0.. and C_OUT + n0.. of the
// phase's (2 C_OUT, K) matrix), and each consumer thread keeps its outputs' running sums in shared
// memory after the barriers (kTotalsBytes).
template <Math M, int C_IN, int C_OUT, int H, int BN_, int CONSUMERS, int STAGES>
struct WgmmaShape {
  using Act = typename MathTypes<M>::Act;
  static constexpr bool kSplit = M == Math::Tf32x3;
  static constexpr int BM = 64 * CONSUMERS;
  static constexpr int BN = BN_;
  static constexpr int BK = 128 / static_cast<int>(sizeof(Act));  // one 128-byte swizzled row
  static constexpr int kStepK = 32 / static_cast<int>(sizeof(Act));  // one wgmma: 16 bf16, 8 tf32
  static constexpr int kStages = STAGES;
  static constexpr int kConsumerThreads = 128 * CONSUMERS;
  static constexpr int kThreads = 128 * (CONSUMERS + 1);
  static constexpr int kABytes = BM * 128, kBBytes = BN * 128;
  static constexpr int kWeightParts = kSplit ? 2 : 1, kWeightPartRows = C_OUT;
  static constexpr int kStageBytes = kABytes + kWeightParts * kBBytes;
  // Where the producer puts the activation and the weight box within a stage, and what wgmma reads as
  // its A (64 rows per consumer warpgroup, kConsumerABytes apart) and B (kWgmmaN rows): here A is the
  // activation rows and B the weights; kernels/phase_gemm_wgmma_image.cuh swaps them. Weight part p
  // (Tf32x3) lies kBBytes * p after kWeightOffset.
  static constexpr int kActOffset = 0, kWeightOffset = kABytes;
  static constexpr int kMmaAOffset = 0, kMmaBOffset = kABytes, kConsumerABytes = 64 * 128, kWgmmaN = BN;
  static constexpr int kTotalsBytes = kSplit ? kConsumerThreads * (BN / 2) * 4 : 0;
  static constexpr int kBarrierBytes = 2 * kStages * 8;
  // Stages, then one full and one empty barrier per stage, then the totals (16-byte aligned); 1024
  // bytes of slack to align the tiles.
  static constexpr int kTotalsOffset = (kStages * kStageBytes + kBarrierBytes + 15) / 16 * 16;
  static constexpr int kSmemBytes = kTotalsOffset + kTotalsBytes + 1024;
  // The A box: whole images when a block covers at least one, else whole rows of one image.
  static constexpr bool kWholeImages = BM >= H * H;
  static constexpr int kBoxImages = kWholeImages ? BM / (H * H) : 1;
  static constexpr int kBoxRows = kWholeImages ? H : BM / H;
  static_assert(kWholeImages ? BM % (H * H) == 0 : (H * H) % BM == 0 && BM % H == 0,
                "a block's rows must be whole images or whole rows of one image");
  static_assert(C_IN % BK == 0 && C_OUT % BN == 0, "tiles must not straddle taps or run past C_OUT");
  static_assert(BN % 64 == 0 && BN <= 128 && H <= 256 && kBoxRows <= 256 && kBoxImages <= 256, "box limits");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block");
  static_assert(!kSplit || C_OUT % 8 == 0, "the lo part's rows follow the hi part's");
};

#if FACEGEN_WGMMA_ENABLED
// Producer: tiles 0..num_k_tiles-1 of this block into the ring.
template <class S, int C_IN, int H>
__device__ __forceinline__ void produce_tiles(const WgmmaMaps& maps, const CUtensorMap* b_map, unsigned char* tiles,
                                              uint64_t* full, uint64_t* empty, int num_k_tiles, int ksize, int py,
                                              int px, int m0, int n0) {
  const int ntx = phase_taps(px, ksize);
  const int img0 = m0 / (H * H), oy0 = (m0 % (H * H)) / H;
  for (int kt = 0; kt < num_k_tiles; ++kt) {
    const int s = kt % S::kStages;
    if (kt >= S::kStages) barrier_wait(&empty[s], ((kt / S::kStages) - 1) & 1);
    const int k0 = kt * S::BK, tap = k0 / C_IN, c0 = k0 % C_IN;
    const int dy = phase_offset(py, tap / ntx), dx = phase_offset(px, tap % ntx);
    unsigned char* stage = tiles + s * S::kStageBytes;
    barrier_arrive_expect_bytes(&full[s], S::kStageBytes);
    tensor_load_4d(stage + S::kActOffset, &maps.a, c0, dx, oy0 + dy, img0, &full[s]);
#pragma unroll
    for (int p = 0; p < S::kWeightParts; ++p)
      tensor_load_2d(stage + S::kWeightOffset + p * S::kBBytes, b_map, k0, n0 + p * S::kWeightPartRows, &full[s]);
  }
}

// Consumer: this warpgroup's 64 x kWgmmaN accumulators over all K tiles.
template <class S, Math M>
__device__ __forceinline__ void multiply_tiles(float (&acc)[S::kWgmmaN / 2], const unsigned char* tiles, uint64_t* full,
                                               uint64_t* empty, int num_k_tiles, int consumer) {
  for (int kt = 0; kt < num_k_tiles; ++kt) {
    const int s = kt % S::kStages;
    barrier_wait(&full[s], (kt / S::kStages) & 1);
    const uint32_t a_tile = smem_address(tiles + s * S::kStageBytes + S::kMmaAOffset) + consumer * S::kConsumerABytes;
    const uint32_t b_tile = smem_address(tiles + s * S::kStageBytes + S::kMmaBOffset);
    const uint64_t a_desc = sw128_descriptor(a_tile), b_desc = sw128_descriptor(b_tile);
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < S::BK / S::kStepK; ++k)
      Wgmma<M, S::kWgmmaN>::mma(acc, descriptor_advance(a_desc, 32 * k), descriptor_advance(b_desc, 32 * k));
    wgmma_commit();
    // Tile kt - 1's wgmmas are done once at most one group (tile kt's) is pending: free its stage.
    wgmma_wait<1>();
    // Every consumer thread arrives (after its own warp's wait), so no warp can still be reading.
    if (kt > 0) barrier_arrive(&empty[(kt - 1) % S::kStages]);
  }
  wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < S::kWgmmaN / 2; ++i) accumulator_fence(acc[i]);
}

// relu(scale * acc + shift) of this warpgroup's 64 x BN block into the phase's output pixels.
template <class S, Math M, int C_OUT, int H>
__device__ __forceinline__ void store_outputs(const float (&acc)[S::BN / 2], const float* __restrict__ scale,
                                              const float* __restrict__ shift, typename S::Act* __restrict__ out,
                                              int m_total, int m_base, int n0, int py, int px) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int m = m_base + 16 * warp + lane / 4 + 8 * half;
    if (m >= m_total) continue;
    const int img = m / (H * H), pix = m % (H * H), oy = pix / H, ox = pix % H;
    typename S::Act* o = out + ((static_cast<int64_t>(img) * 2 * H + 2 * oy + py) * 2 * H + 2 * ox + px) * C_OUT;
#pragma unroll
    for (int j = 0; j < S::BN / 8; ++j) {
      const int n = n0 + 8 * j + 2 * (lane % 4);
      const float v0 = fmaxf(fmaf(acc[4 * j + 2 * half], scale[n], shift[n]), 0.f);
      const float v1 = fmaxf(fmaf(acc[4 * j + 2 * half + 1], scale[n + 1], shift[n + 1]), 0.f);
      Store<M>::two(o + n, v0, v1);
    }
  }
}
#endif  // FACEGEN_WGMMA_ENABLED

template <Math M, int C_IN, int C_OUT, int H, int BN, int CONSUMERS, int STAGES>
__global__ void __launch_bounds__(128 * (CONSUMERS + 1), BN == 64 ? 2 : 1)
tconv_phase_wgmma(const __grid_constant__ WgmmaMaps maps,  // A: in (n, H, H, C_IN); B: four phases' (C_OUT, K)
                  const float* __restrict__ scale, const float* __restrict__ shift,  // (C_OUT)
                  typename MathTypes<M>::Act* __restrict__ out,                     // (n, 2H, 2H, C_OUT)
                  int m_total,                                                      // n * H * H
                  int ksize) {                                                      // 4 or 5
#if FACEGEN_WGMMA_ENABLED
  using S = WgmmaShape<M, C_IN, C_OUT, H, BN, CONSUMERS, STAGES>;
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
      barrier_init(&empty[s], 128 * CONSUMERS);
    }
    barrier_init_fence();
  }
  __syncthreads();
  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    if (threadIdx.x == 0) {
      const CUtensorMap* b_map = z == 0 ? &maps.b[0] : z == 1 ? &maps.b[1] : z == 2 ? &maps.b[2] : &maps.b[3];
      produce_tiles<S, C_IN, H>(maps, b_map, tiles, full, empty, num_k_tiles, ksize, py, px, m0, n0);
    }
  } else {
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;
    multiply_tiles<S, M>(acc, tiles, full, empty, num_k_tiles, warpgroup - 1);
    store_outputs<S, M, C_OUT, H>(acc, scale, shift, out, m_total, m0 + 64 * (warpgroup - 1), n0, py, px);
  }
#endif
}

}  // namespace gpu
}  // namespace facegen
