// tconv_output_any.cuh: the last layer of any network of the family (common/model_spec.hpp), the
// stride-2 k x k transposed convolution (n, h, h, c_in) -> (n, 2h, 2h, nc), nc = 1 or 3, h = 16, 32 or
// 64 (images of 32, 64 or 128 pixels), plus bias and tanh, direct, in float32 FFMA with float32
// weights in every precision.
//
// With 1 or 3 output channels a GEMM would waste the tensor cores; the reuse is in the convolution
// itself. One thread makes the 2 x 2 output block (all four phases) of one input position: per four
// channels it loads the 3 x 3 input pixels around it once (every tap of k = 4 and k = 5 reads input
// row oy + dy with dy in -1..1, see phase_gemm.cuh), then each tap's warp-uniform weight float4
// (shared memory, broadcast) feeds four FMAs per output channel. Only the taps of each phase run, so
// no multiply touches an inserted zero. Each sum runs over channel groups of 4 in order, taps in
// (kh, kw) order within each: the same for any batch size and image position.
#pragma once

#include "common/cuda_check.cuh"
#include "kernels/phase_gemm.cuh"

namespace facegen {
namespace gpu {

constexpr int kAnyOutThreads = 128;            // input positions per block: h * h must be a multiple
constexpr int kAnyOutMaxCin = 256;             // base_channels up to 256
template <int K, int NC>
constexpr int any_out_smem_bytes(int c_in) { return K * K * NC * c_in * 4; }

// Four channels of input pixel (y, x) as float32, zero outside the map.
template <Math M>
__device__ __forceinline__ float4 any_out_load(const typename MathTypes<M>::Act* img, int y, int x, int h, int c_in,
                                               int c) {
  if (y < 0 || y >= h || x < 0 || x >= h) return make_float4(0.f, 0.f, 0.f, 0.f);
  const int64_t at = (static_cast<int64_t>(y) * h + x) * c_in + c;
  if constexpr (M == Math::Bf16) {
    const uint2 u = *reinterpret_cast<const uint2*>(img + at);
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                       __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
  } else {
    return *reinterpret_cast<const float4*>(img + at);
  }
}

// Grid (h * h / 128, n). weight (K, K, NC, c_in), c_in % 4 == 0; bias (NC).
template <Math M, int K, int NC>
__global__ void __launch_bounds__(kAnyOutThreads)
tconv_output_any_tanh(const typename MathTypes<M>::Act* __restrict__ in,  // (n, h, h, c_in)
                      const float* __restrict__ weight, const float* __restrict__ bias,
                      float* __restrict__ out,                            // (n, 2h, 2h, NC)
                      int h, int c_in) {
  extern __shared__ __align__(16) float any_out_w[];  // (K, K, NC, c_in)
  const int tid = threadIdx.x;
  for (int q = tid; q < K * K * NC * c_in / 4; q += kAnyOutThreads)
    cp_async16(any_out_w + 4 * q, weight + 4 * q, true);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  const int img = blockIdx.y;
  const int pos = blockIdx.x * kAnyOutThreads + tid, oy = pos / h, ox = pos % h;
  const typename MathTypes<M>::Act* in_img = in + static_cast<int64_t>(img) * h * h * c_in;
  float acc[2][2][NC];
#pragma unroll
  for (int a = 0; a < 2; ++a)
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
      for (int k = 0; k < NC; ++k) acc[a][b][k] = 0.f;

#pragma unroll 1
  for (int c = 0; c < c_in; c += 4) {
    float4 v[3][3];
#pragma unroll
    for (int dy = 0; dy < 3; ++dy)
#pragma unroll
      for (int dx = 0; dx < 3; ++dx) v[dy][dx] = any_out_load<M>(in_img, oy + dy - 1, ox + dx - 1, h, c_in, c);
#pragma unroll
    for (int kh = 0; kh < K; ++kh) {
      const int py = (kh & 1) ? 0 : 1, dy = (py + 1 - kh) / 2;
#pragma unroll
      for (int kw = 0; kw < K; ++kw) {
        const int px = (kw & 1) ? 0 : 1, dx = (px + 1 - kw) / 2;
        const float4 x = v[dy + 1][dx + 1];
#pragma unroll
        for (int k = 0; k < NC; ++k) {
          const float4 w = *reinterpret_cast<const float4*>(any_out_w + ((kh * K + kw) * NC + k) * c_in + c);
          float a = acc[py][px][k];
          a = fmaf(x.x, w.x, a);
          a = fmaf(x.y, w.y, a);
          a = fmaf(x.z, w.z, a);
          a = fmaf(x.w, w.w, a);
          acc[py][px][k] = a;
        }
      }
    }
  }
#pragma unroll
  for (int py = 0; py < 2; ++py)
#pragma unroll
    for (int px = 0; px < 2; ++px) {
      float* o = out + ((static_cast<int64_t>(img) * 2 * h + 2 * oy + py) * 2 * h + 2 * ox + px) * NC;
#pragma unroll
      for (int k = 0; k < NC; ++k) o[k] = tanhf(acc[py][px][k] + bias[k]);
    }
}

template <Math M, int K, int NC>
void configure_tconv_output_any() {
  CUDA_CHECK(cudaFuncSetAttribute(tconv_output_any_tanh<M, K, NC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  any_out_smem_bytes<K, NC>(kAnyOutMaxCin)));
}

template <Math M, int K, int NC>
void launch_tconv_output_any(const void* in, int n, int h, int c_in, const float* weight, const float* bias,
                             float* images, cudaStream_t stream) {
  if (h * h % kAnyOutThreads != 0) throw std::logic_error("the last layer's input map must hold whole blocks of positions");
  const dim3 grid(h * h / kAnyOutThreads, n);
  tconv_output_any_tanh<M, K, NC><<<grid, kAnyOutThreads, any_out_smem_bytes<K, NC>(c_in), stream>>>(
      static_cast<const typename MathTypes<M>::Act*>(in), weight, bias, images, h, c_in);
  CUDA_CHECK_LAUNCH();
}

}  // namespace gpu
}  // namespace facegen
