// projection_any.cuh: the first layer of any network of the family (common/model_spec.hpp), the
// latent z (n, nz) times the projection matrix W (nz, 16 * C0) whose columns are the (4, 4, C0)
// feature map in HWC order, with the first batch norm and ReLU folded into the epilogue:
//   out(img, j) = relu(scale[j] * sum_k z(img, k) W(k, j) + shift[j])
// nz is 1..1024: z passes through shared memory 128 latent values at a time, and W is uploaded
// with its rows padded by zeros to nz_pad (a multiple of 4), so every 16-byte read stays inside it.
// Float32 FFMA in every flavour; each sum runs over k in ascending order whatever the batch size.
#pragma once

#include "common/cuda_check.cuh"
#include "kernels/phase_gemm.cuh"

namespace facegen {
namespace gpu {

constexpr int kAnyProjImages = 32;                    // images per block (blockIdx.y)
constexpr int kAnyProjThreads = 256;                  // each makes two adjacent columns
constexpr int kAnyProjColumns = 2 * kAnyProjThreads;  // columns per block (blockIdx.x)
constexpr int kAnyProjKChunk = 128;                   // latent values per pass through shared memory

template <Math M>
__global__ void __launch_bounds__(kAnyProjThreads)
projection_any_bn_relu(const float* __restrict__ z,       // (n, nz)
                       int n, int nz, int nz_pad, int k_out,
                       const float* __restrict__ weight,  // (nz_pad, k_out), rows nz.. zero
                       const float* __restrict__ scale, const float* __restrict__ shift,  // (k_out)
                       typename MathTypes<M>::Act* __restrict__ out) {                     // (n, k_out)
  __shared__ __align__(16) float zs[kAnyProjImages][kAnyProjKChunk];
  const int img0 = blockIdx.y * kAnyProjImages;
  const int j = blockIdx.x * kAnyProjColumns + 2 * threadIdx.x;  // columns j, j + 1
  float acc[kAnyProjImages][2];
#pragma unroll
  for (int i = 0; i < kAnyProjImages; ++i) acc[i][0] = acc[i][1] = 0.f;
  for (int kc = 0; kc < nz_pad; kc += kAnyProjKChunk) {
    const int kn = min(kAnyProjKChunk, nz_pad - kc);
    __syncthreads();  // the chunk before is read by every thread
    for (int q = threadIdx.x; q < kAnyProjImages * kn; q += blockDim.x) {
      const int i = q / kn, k = q % kn;
      zs[i][k] = img0 + i < n && kc + k < nz ? z[static_cast<int64_t>(img0 + i) * nz + kc + k] : 0.f;
    }
    __syncthreads();
    if (j >= k_out) continue;
    for (int k = 0; k < kn; k += 4) {
      float2 w[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) w[e] = *reinterpret_cast<const float2*>(weight + static_cast<int64_t>(kc + k + e) * k_out + j);
#pragma unroll
      for (int i = 0; i < kAnyProjImages; ++i) {
        const float4 zv = *reinterpret_cast<const float4*>(&zs[i][k]);
        const float zk[4] = {zv.x, zv.y, zv.z, zv.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          acc[i][0] = fmaf(zk[e], w[e].x, acc[i][0]);
          acc[i][1] = fmaf(zk[e], w[e].y, acc[i][1]);
        }
      }
    }
  }
  if (j >= k_out) return;
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    const float sc = scale[j + c], sh = shift[j + c];
#pragma unroll
    for (int i = 0; i < kAnyProjImages; ++i) {
      if (img0 + i >= n) break;
      const float v = fmaxf(fmaf(acc[i][c], sc, sh), 0.f);
      const int64_t o = static_cast<int64_t>(img0 + i) * k_out + j + c;
      if constexpr (M == Math::Bf16) out[o] = __float2bfloat16_rn(v);
      else if constexpr (M == Math::Tf32) out[o] = round_tf32(v);
      else out[o] = v;
    }
  }
}

// k_out even; weight padded to nz_pad = nz rounded up to 4 rows.
template <Math M>
void launch_projection_any(const float* z, int n, int nz, int nz_pad, int k_out, const float* weight,
                           const float* scale, const float* shift, void* out, cudaStream_t stream) {
  const dim3 grid((k_out + kAnyProjColumns - 1) / kAnyProjColumns, (n + kAnyProjImages - 1) / kAnyProjImages);
  projection_any_bn_relu<M><<<grid, kAnyProjThreads, 0, stream>>>(
      z, n, nz, nz_pad, k_out, weight, scale, shift, static_cast<typename MathTypes<M>::Act*>(out));
  CUDA_CHECK_LAUNCH();
}

}  // namespace gpu
}  // namespace facegen
