// tconv_output.cuh: the generator's last layer, act3 (n, 32, 32, 64) -> images (n, 64, 64, 3) with
// bias and tanh, a KS x KS kernel (KS = 5 or 4), as a direct convolution in float32 FFMA (every
// precision; the tensor-core form for bf16 and tf32 is kernels/tconv_output_mma.cuh), and its launcher.
// Below, the counts are for KS = 5; KS = 4 runs 16 taps where they say 25.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda_check.cuh"
#include "kernels/phase_gemm.cuh"

namespace facegen {
namespace gpu {

// The last transposed convolution (64 -> 3 channels, 32x32 -> 64x64) with bias and tanh, direct, in
// float32 FFMA with float32 weights in every precision.
//
// With only 3 output channels, a thread that makes one output pixel does 3 FMAs per input value it
// loads: any such kernel is bound by shared-memory loads, not by the FMAs. The reuse is in the
// convolution itself: an input pixel feeds 25 (output pixel, tap) pairs. So each thread makes the
// whole 2x2 output block (all four phases) of kOutRowsPerThread input positions in one column: per
// four channels it loads the (rows + 2) x 3 input pixels around them once into registers, then for
// each of the 25 taps and 3 output channels one warp-uniform (broadcast) weight float4 feeds
// 4 x kOutRowsPerThread FMAs. Per four channels and thread: 1200 FFMA against 18 input and 75
// weight loads.
//
// A block is 128 threads = kOutRowsPerBlock input rows x 32 columns of one image. The input rows it
// needs (with one halo row each side, zero outside the map) stream through shared memory eight
// channels at a time, double buffered with cp.async; the weights (5, 5, 3, 64) stay in shared memory.
// Every output's sum runs over channel groups of 4 in order, taps in a fixed order within each,
// the same for any batch size and any image position.
constexpr int kOutCin = 64, kOutCout = 3, kOutHin = 32;
constexpr int kOutRowsPerThread = 4;
constexpr int kOutThreads = 128;
constexpr int kOutRowsPerBlock = kOutRowsPerThread * kOutThreads / 32;  // 16
constexpr int kOutTileRows = kOutRowsPerBlock + 2, kOutTileCols = kOutHin + 2;
constexpr int kOutTilePixels = kOutTileRows * kOutTileCols;
constexpr int kOutStageChannels = 8;  // 32 bytes of fp32 (one sector), 16 of bf16 per pixel per stage
constexpr int kOutStages = 2;
template <Math M, int KS> struct OutShape {
  using Act = typename MathTypes<M>::Act;
  static_assert(KS == 4 || KS == 5, "kernel size 4 or 5");
  static constexpr int kWeightFloats = KS * KS * kOutCout * kOutCin;
  static constexpr int kChunksPerPixel = kOutStageChannels * sizeof(Act) / 16;  // 16-byte chunks: 2 or 1
  static constexpr int kStageBytes = kOutTilePixels * kOutStageChannels * sizeof(Act);
  static constexpr int kSmemBytes = kWeightFloats * 4 + kOutStages * kStageBytes;
};

// Four channels (half h of a stage's eight) of tile pixel p as float32. fp32 stage layout: two planes
// [pixel] of float4 (channels 0-3, 4-7), so a warp's 32 consecutive pixels are 512 contiguous bytes;
// bf16: [pixel] of 8 bfloat16, read 8 bytes at a time.
template <Math M>
__device__ __forceinline__ float4 out_tile_load(const unsigned char* stage, int half, int p) {
  if constexpr (M == Math::Bf16) {
    uint2 u = reinterpret_cast<const uint2*>(stage)[2 * p + half];
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                       __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
  } else {
    return reinterpret_cast<const float4*>(stage)[half * kOutTilePixels + p];
  }
}

template <Math M, int KS>
__global__ void __launch_bounds__(kOutThreads, 3)
tconv_output_tanh(const typename MathTypes<M>::Act* __restrict__ in,  // (n, 32, 32, 64)
                  const float* __restrict__ weight,                   // (KS, KS, 3, 64)
                  const float* __restrict__ bias,                     // (3)
                  float* __restrict__ out) {                          // (n, 64, 64, 3)
  using O = OutShape<M, KS>;
  using Act = typename MathTypes<M>::Act;
  extern __shared__ __align__(16) unsigned char out_smem[];
  float* w_s = reinterpret_cast<float*>(out_smem);  // (KS * KS, 3, 64)
  unsigned char* tiles = out_smem + O::kWeightFloats * 4;
  const int tid = threadIdx.x;
  const int y0 = blockIdx.x * kOutRowsPerBlock, img = blockIdx.y;
  const Act* in_img = in + static_cast<int64_t>(img) * kOutHin * kOutHin * kOutCin;

  // Stage s: channels 8s..8s+7 of tile pixels (rows y0-1 .. y0+16, columns -1..32).
  auto load_stage = [&](int buf, int s) {
    unsigned char* t = tiles + buf * O::kStageBytes;
    for (int q = tid; q < kOutTilePixels * O::kChunksPerPixel; q += kOutThreads) {
      const int p = q / O::kChunksPerPixel, h = q % O::kChunksPerPixel;
      const int iy = y0 + p / kOutTileCols - 1, ix = p % kOutTileCols - 1;
      const bool valid = iy >= 0 && iy < kOutHin && ix >= 0 && ix < kOutHin;
      const Act* src = valid ? in_img + (iy * kOutHin + ix) * kOutCin + s * kOutStageChannels + h * 4 : in;
      unsigned char* dst = (M == Math::Bf16) ? t + p * 16 : t + (h * kOutTilePixels + p) * 16;
      cp_async16(dst, src, valid);
    }
  };
  for (int q = tid; q < O::kWeightFloats / 4; q += kOutThreads)
    cp_async16(w_s + 4 * q, weight + 4 * q, true);
  load_stage(0, 0);
  cp_async_commit();

  const int warp = tid / 32, ox = tid % 32;
  const int r0 = warp * kOutRowsPerThread;  // first tile row of this thread's window (input row y0 + r0 - 1)
  float acc[kOutRowsPerThread][2][2][kOutCout];
#pragma unroll
  for (int r = 0; r < kOutRowsPerThread; ++r)
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
      for (int b = 0; b < 2; ++b)
#pragma unroll
        for (int k = 0; k < kOutCout; ++k) acc[r][a][b][k] = 0.f;

  constexpr int kNumStages = kOutCin / kOutStageChannels;
#pragma unroll 1
  for (int s = 0; s < kNumStages; ++s) {
    if (s + 1 < kNumStages) load_stage((s + 1) % kOutStages, s + 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const unsigned char* t = tiles + (s % kOutStages) * O::kStageBytes;
#pragma unroll 1
    for (int half = 0; half < 2; ++half) {
      float4 v[kOutRowsPerThread + 2][3];
#pragma unroll
      for (int r = 0; r < kOutRowsPerThread + 2; ++r)
#pragma unroll
        for (int c = 0; c < 3; ++c) v[r][c] = out_tile_load<M>(t, half, (r0 + r) * kOutTileCols + ox + c);
      const float4* wq = reinterpret_cast<const float4*>(w_s) + s * 2 + half;  // channel group 2s + half
#pragma unroll
      for (int kh = 0; kh < KS; ++kh) {
        const int py = (kh & 1) ? 0 : 1, dy = (py + 1 - kh) / 2;
#pragma unroll
        for (int kw = 0; kw < KS; ++kw) {
          const int px = (kw & 1) ? 0 : 1, dx = (px + 1 - kw) / 2;
#pragma unroll
          for (int k = 0; k < kOutCout; ++k) {
            const float4 w = wq[((kh * KS + kw) * kOutCout + k) * (kOutCin / 4)];
#pragma unroll
            for (int r = 0; r < kOutRowsPerThread; ++r) {
              const float4 x = v[r + 1 + dy][1 + dx];
              float a = acc[r][py][px][k];
              a = fmaf(x.x, w.x, a);
              a = fmaf(x.y, w.y, a);
              a = fmaf(x.z, w.z, a);
              a = fmaf(x.w, w.w, a);
              acc[r][py][px][k] = a;
            }
          }
        }
      }
    }
    __syncthreads();  // the buffer just read is the one the next iteration refills
  }

  const float b0 = bias[0], b1 = bias[1], b2 = bias[2];
#pragma unroll
  for (int r = 0; r < kOutRowsPerThread; ++r)
#pragma unroll
    for (int py = 0; py < 2; ++py) {
      const int y = 2 * (y0 + r0 + r) + py;
      float* o = out + ((static_cast<int64_t>(img) * 64 + y) * 64 + 2 * ox) * kOutCout;  // 6 floats, 8-byte aligned
      const float* a0 = acc[r][py][0];
      const float* a1 = acc[r][py][1];
      reinterpret_cast<float2*>(o)[0] = make_float2(tanhf(a0[0] + b0), tanhf(a0[1] + b1));
      reinterpret_cast<float2*>(o)[1] = make_float2(tanhf(a0[2] + b2), tanhf(a1[0] + b0));
      reinterpret_cast<float2*>(o)[2] = make_float2(tanhf(a1[1] + b1), tanhf(a1[2] + b2));
    }
}

// Raises the kernel's shared-memory limit (float32 and bf16 activations); once per process.
template <int KS>
void configure_tconv_output_tanh() {
  CUDA_CHECK(cudaFuncSetAttribute(tconv_output_tanh<Math::Fp32, KS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  OutShape<Math::Fp32, KS>::kSmemBytes));
  CUDA_CHECK(cudaFuncSetAttribute(tconv_output_tanh<Math::Bf16, KS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  OutShape<Math::Bf16, KS>::kSmemBytes));
}

// act3 (M = Fp32: float32, also tf32's; M = Bf16: bfloat16) -> images, n images.
template <Math M, int KS>
void launch_tconv_output_tanh(const void* act3, int n, const float* weight, const float* bias, float* images,
                              cudaStream_t stream) {
  static_assert(kOutHin % kOutRowsPerBlock == 0, "output-layer blocks must tile the rows");
  if (n <= 0) return;
  const dim3 grid(kOutHin / kOutRowsPerBlock, n);
  tconv_output_tanh<M, KS><<<grid, kOutThreads, OutShape<M, KS>::kSmemBytes, stream>>>(
      static_cast<const typename MathTypes<M>::Act*>(act3), weight, bias, images);
  CUDA_CHECK_LAUNCH();
}

}  // namespace gpu
}  // namespace facegen
