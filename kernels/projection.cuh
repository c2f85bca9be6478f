// projection.cuh: the generator's first layer, z (n, 100) -> act0 (n, 4, 4, 512), with the first
// batch norm and ReLU folded into its epilogue, and its launcher. Float32 FFMA in every precision;
// the output is stored in the precision's activation type (kernels/phase_gemm.cuh: Math, Store).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda_check.cuh"
#include "kernels/phase_gemm.cuh"

namespace facegen {
namespace gpu {

// Projection z (n, 100) · W (100, 8192) with the first batch norm and ReLU folded into the epilogue:
// out(img, j) = relu(scale[j] * sum_k z(img, k) W(k, j) + shift[j]). Float32 FFMA in every flavour
// (0.5% of the network's work); the output is stored in the flavour's activation type. Each thread
// makes two adjacent columns for 32 images, so one 16-byte broadcast of z feeds eight FMAs per
// column pair and the weights arrive as coalesced 8-byte loads.
constexpr int kProjImagesPerBlock = 32;
constexpr int kProjThreads = 256;
constexpr int kProjColumnsPerBlock = 2 * kProjThreads;

template <Math M>
__global__ void __launch_bounds__(kProjThreads)
projection_bn_relu(const float* __restrict__ z, int n, int k_in, int k_out,
                   const float* __restrict__ weight, const float* __restrict__ scale,
                   const float* __restrict__ shift, typename MathTypes<M>::Act* __restrict__ out) {
  constexpr int kMaxK = 128;
  __shared__ __align__(16) float zs[kProjImagesPerBlock][kMaxK];
  const int img0 = blockIdx.y * kProjImagesPerBlock;
  for (int q = threadIdx.x; q < kProjImagesPerBlock * k_in; q += blockDim.x) {
    int i = q / k_in, k = q % k_in;
    zs[i][k] = img0 + i < n ? z[static_cast<int64_t>(img0 + i) * k_in + k] : 0.f;
  }
  __syncthreads();
  const int j = blockIdx.x * kProjColumnsPerBlock + 2 * threadIdx.x;  // columns j, j + 1 (k_out even)
  if (j >= k_out) return;
  float acc[kProjImagesPerBlock][2];
#pragma unroll
  for (int i = 0; i < kProjImagesPerBlock; ++i) acc[i][0] = acc[i][1] = 0.f;
  // k in steps of 4 so one 16-byte shared load feeds eight FMAs (k_in % 4 == 0, checked by the caller);
  // each sum still runs over k in ascending order.
  for (int k = 0; k < k_in; k += 4) {
    float2 w[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) w[e] = *reinterpret_cast<const float2*>(weight + static_cast<int64_t>(k + e) * k_out + j);
#pragma unroll
    for (int i = 0; i < kProjImagesPerBlock; ++i) {
      float4 zv = *reinterpret_cast<const float4*>(&zs[i][k]);
      const float zk[4] = {zv.x, zv.y, zv.z, zv.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        acc[i][0] = fmaf(zk[e], w[e].x, acc[i][0]);
        acc[i][1] = fmaf(zk[e], w[e].y, acc[i][1]);
      }
    }
  }
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    const float sc = scale[j + c], sh = shift[j + c];
#pragma unroll
    for (int i = 0; i < kProjImagesPerBlock; ++i) {
      if (img0 + i >= n) break;
      float v = fmaxf(fmaf(acc[i][c], sc, sh), 0.f);
      int64_t o = static_cast<int64_t>(img0 + i) * k_out + j + c;
      if constexpr (M == Math::Bf16) out[o] = __float2bfloat16_rn(v);
      else if constexpr (M == Math::Tf32) out[o] = round_tf32(v);
      else out[o] = v;
    }
  }
}

// z (n, k_in) float32 -> out (n, k_out) in M's activation type; k_in % 4 == 0, k_in <= 128 and
// k_out % kProjColumnsPerBlock == 0 (the caller checks them at compile time).
template <Math M>
void launch_projection_bn_relu(const float* z, int n, int k_in, int k_out, const float* weight, const float* scale,
                               const float* shift, void* out, cudaStream_t stream) {
  if (n <= 0) return;
  const dim3 grid(k_out / kProjColumnsPerBlock, (n + kProjImagesPerBlock - 1) / kProjImagesPerBlock);
  projection_bn_relu<M><<<grid, kProjThreads, 0, stream>>>(z, n, k_in, k_out, weight, scale, shift,
                                                           static_cast<typename MathTypes<M>::Act*>(out));
  CUDA_CHECK_LAUNCH();
}

}  // namespace gpu
}  // namespace facegen
