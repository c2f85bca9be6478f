// phase_gemm_wgmma_image.cuh: phase GEMMs on Hopper (sm_90a) with the operands swapped: the output
// channels are wgmma's M (the weights' tile, 64 per consumer warpgroup) and the positions of whole
// images its N (16 bf16 or 8 tf32 of K per step). tconv3: one 16 x 16 image and 64 channels per
// block (one consumer, m64n256); tconv2: four 8 x 8 images and 128 channels (two consumers, m64n256);
// tconv1: eight 4 x 4 images and 256 channels (four consumers, m64n128).
//
// Why: the row tiles of kernels/phase_gemm_wgmma.cuh give tconv3 (C_OUT = 64) m64n64 steps, which read
// 1/16 byte of shared memory per multiply-add (A and B both through the shared-memory port), and two
// blocks per image re-read every weight tile: tconv3 ran at 365 TFLOP/s against tconv1's 600. An
// m64n256k16 step reads (64 + 256) x 32 bytes for 64 x 256 x 16 multiply-adds, 0.039 byte each, and a
// weight tile is read once per 256 positions. In tconv1 and tconv2 the gain is in what comes from
// L2: a block's stage brings the weights for all C_OUT channels once for its positions, a quarter
// fewer bytes per output than the row tiles' 128 x 128.
//
// One block = its images x one phase (grid: 4 phases x image groups, the phases side by side so the
// activations come from DRAM once). The producer is one thread of the warp after the consumers
// (produce_tiles, with the same tensor maps as the row tiles: the activation box is whole images, BK
// channels at the tap's offset, zeros outside the map and past image n); the consumer warpgroups run
// multiply_tiles. The accumulators are (channel, position), so the epilogue writes relu(scale * acc +
// shift) into shared memory (the pipeline's stages, idle by then) as (position, channel) rows and
// copies them out as whole output pixels (C_OUT channels, 128 or 256 bytes in bf16) in 16-byte pieces.
//
// Every output is one accumulator chain over K in ascending order, the same wgmma steps for every
// image and batch size: the bits do not depend on the batch.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/hopper.cuh"
#include "kernels/phase_gemm.cuh"
#include "kernels/phase_gemm_wgmma.cuh"

namespace facegen {
namespace gpu {

// Positions per block (wgmma's N): 256, or 128 where C_OUT = 256 needs four consumer warpgroups (the
// register file holds four of them at 64 accumulators a thread, not at 128).
template <int C_OUT> constexpr int image_kernel_positions() { return C_OUT > 128 ? 128 : 256; }

template <Math M, int C_IN, int C_OUT, int H, int STAGES, int MIN_BLOCKS>
struct WgmmaImageShape {
  using Act = typename MathTypes<M>::Act;
  static constexpr int kPositions = image_kernel_positions<C_OUT>();  // wgmma's N: whole images
  static constexpr int kImages = kPositions / (H * H);  // per block
  static constexpr int CONSUMERS = C_OUT / 64;       // warpgroups, 64 channels (wgmma's M) each
  static constexpr int BK = 128 / static_cast<int>(sizeof(Act));
  static constexpr int kStepK = 32 / static_cast<int>(sizeof(Act));
  static constexpr int kStages = STAGES;
  static constexpr int kMinBlocks = MIN_BLOCKS;
  static constexpr int kConsumerThreads = 128 * CONSUMERS;
  static constexpr int kThreads = kConsumerThreads + 32;  // consumer warpgroups, producer warp
  static constexpr int kWeightBytes = C_OUT * 128, kActBytes = kPositions * 128;
  static constexpr int kStageBytes = kWeightBytes + kActBytes;
  static constexpr int kWeightOffset = 0, kActOffset = kWeightBytes;
  static constexpr int kWeightParts = 1, kBBytes = kWeightBytes, kWeightPartRows = C_OUT;  // (produce_tiles)
  static constexpr int kMmaAOffset = kWeightOffset, kMmaBOffset = kActOffset, kConsumerABytes = 64 * 128;
  static constexpr int kWgmmaN = kPositions;
  static constexpr int kBoxImages = kImages, kBoxRows = H;
  // Epilogue rows: one per position, C_OUT values and 16 bytes of padding, which makes the
  // accumulators' 2- or 4-byte stores conflict-free and keeps rows 16-byte aligned.
  static constexpr int kOutPitch = C_OUT + 16 / static_cast<int>(sizeof(Act));
  static constexpr int kOutBytes = kPositions * kOutPitch * static_cast<int>(sizeof(Act));
  static constexpr int kSmemBytes = kStages * kStageBytes + 2 * kStages * 8 + 1024;
  static_assert(C_OUT % 64 == 0 && CONSUMERS <= 4, "one to four consumer warpgroups of 64 channels");
  static_assert(kPositions % 64 == 0 && kPositions <= 256, "wgmma's N");
  static_assert(kPositions % (H * H) == 0, "a block's positions must be whole images");
  static_assert(C_IN % BK == 0, "K tiles must not straddle taps");
  static_assert(kWeightBytes % 1024 == 0, "the activation tile must stay 1024-byte aligned");
  static_assert(kOutBytes <= kStages * kStageBytes, "the epilogue reuses the stages");
  static_assert(MIN_BLOCKS * (kSmemBytes + 1024) <= 228 * 1024, "shared memory per SM");
};

#if FACEGEN_WGMMA_ENABLED
// Epilogue: relu(scale * acc + shift) of the block's C_OUT channels x kPositions positions of phase (py, px).
// Consumer warpgroup g's accumulators (see Wgmma) hold channels 64 g + 16 warp + lane / 4 (+ 8) at
// positions 8 j + 2 (lane % 4) (+ 1); they go to stage_out[position][channel], then out as 16-byte
// pieces of whole output pixels of the images below n.
template <class S, Math M, int C_OUT, int H>
__device__ __forceinline__ void store_image_outputs(const float (&acc)[S::kWgmmaN / 2], const float* __restrict__ scale,
                                                    const float* __restrict__ shift, typename S::Act* stage_out,
                                                    typename S::Act* __restrict__ out, int n, int img0, int py, int px) {
  using Act = typename S::Act;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;  // warp: 4 * consumer + warp in its group
  consumer_warpgroups_sync(S::kConsumerThreads);  // every wgmma has completed: the stages may be overwritten
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int c = 16 * warp + lane / 4 + 8 * half;
    const float sc = scale[c], sh = shift[c];
#pragma unroll
    for (int j = 0; j < S::kWgmmaN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float v = fmaxf(fmaf(acc[4 * j + 2 * half + e], sc, sh), 0.f);
        Act* dst = stage_out + (8 * j + 2 * (lane % 4) + e) * S::kOutPitch + c;
        if constexpr (M == Math::Bf16) *dst = __float2bfloat16_rn(v);
        else *dst = round_tf32(v);
      }
  }
  consumer_warpgroups_sync(S::kConsumerThreads);
  constexpr int kPieces = C_OUT * static_cast<int>(sizeof(Act)) / 16, kPerPiece = 16 / static_cast<int>(sizeof(Act));
#pragma unroll 4
  for (int q = threadIdx.x; q < S::kPositions * kPieces; q += S::kConsumerThreads) {
    const int p = q / kPieces, piece = q % kPieces, img = img0 + p / (H * H), oy = p % (H * H) / H, ox = p % H;
    if (img >= n) break;  // p only grows with q
    const uint4 v = *reinterpret_cast<const uint4*>(stage_out + p * S::kOutPitch + piece * kPerPiece);
    Act* o = out + ((static_cast<int64_t>(img) * 2 * H + 2 * oy + py) * 2 * H + 2 * ox + px) * C_OUT;
    *reinterpret_cast<uint4*>(o + piece * kPerPiece) = v;
  }
}
#endif  // FACEGEN_WGMMA_ENABLED

template <Math M, int C_IN, int C_OUT, int H, int STAGES, int MIN_BLOCKS>
__global__ void __launch_bounds__(WgmmaImageShape<M, C_IN, C_OUT, H, STAGES, MIN_BLOCKS>::kThreads, MIN_BLOCKS)
tconv_phase_wgmma_image(const __grid_constant__ WgmmaMaps maps,  // A: in (n, H, H, C_IN); B: four phases' (C_OUT, K)
                        const float* __restrict__ scale, const float* __restrict__ shift,  // (C_OUT)
                        typename MathTypes<M>::Act* __restrict__ out,                     // (n, 2H, 2H, C_OUT)
                        int n, int ksize) {
#if FACEGEN_WGMMA_ENABLED
  using S = WgmmaImageShape<M, C_IN, C_OUT, H, STAGES, MIN_BLOCKS>;
  extern __shared__ unsigned char wgmma_smem[];
  unsigned char* tiles = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(wgmma_smem) + 1023) & ~uintptr_t{1023});
  uint64_t* full = reinterpret_cast<uint64_t*>(tiles + S::kStages * S::kStageBytes);
  uint64_t* empty = full + S::kStages;
  const int z = blockIdx.x % 4, img0 = blockIdx.x / 4 * S::kImages, py = phase_py(z), px = phase_px(z);
  const int num_k_tiles = phase_k_total(z, C_IN, ksize) / S::BK;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S::kStages; ++s) {
      barrier_init(&full[s], 1);
      barrier_init(&empty[s], S::kConsumerThreads);
    }
    barrier_init_fence();
  }
  __syncthreads();
  if (threadIdx.x >= S::kConsumerThreads) {
    if (threadIdx.x == S::kConsumerThreads) {
      const CUtensorMap* b_map = z == 0 ? &maps.b[0] : z == 1 ? &maps.b[1] : z == 2 ? &maps.b[2] : &maps.b[3];
      produce_tiles<S, C_IN, H>(maps, b_map, tiles, full, empty, num_k_tiles, ksize, py, px, img0 * H * H, 0);
    }
  } else {
    float acc[S::kWgmmaN / 2];
#pragma unroll
    for (int i = 0; i < S::kWgmmaN / 2; ++i) acc[i] = 0.f;
    multiply_tiles<S, M>(acc, tiles, full, empty, num_k_tiles, threadIdx.x / 128);
    store_image_outputs<S, M, C_OUT, H>(acc, scale, shift, reinterpret_cast<typename S::Act*>(tiles), out, n, img0, py, px);
  }
#endif
}

}  // namespace gpu
}  // namespace facegen
