// image_half.cu: see image_half.hpp.
#include "kernels/image_half.hpp"

#include <cuda_fp16.h>

#include <algorithm>

#include "common/cuda_check.cuh"

namespace facegen {
namespace gpu {

namespace {

constexpr int kThreads = 256;

// float16 bits of x, rounded to nearest, ties to even.
__device__ __forceinline__ uint32_t half_bits(float x) { return __half_as_ushort(__float2half_rn(x)); }

// Eight values per step: two 16-byte loads, one 16-byte store. Every value is rounded on its own,
// so where a value falls in the grid decides nothing about its result.
__global__ void __launch_bounds__(kThreads)
images_to_half(const float* __restrict__ in,  // (count)
               int64_t count,
               uint16_t* __restrict__ out) {   // (count)
  const int64_t groups = count / 8;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; g < groups; g += stride) {
    const float4 a = reinterpret_cast<const float4*>(in)[2 * g];
    const float4 b = reinterpret_cast<const float4*>(in)[2 * g + 1];
    // Value 2k in the low half of word k (little-endian, as the host reads them).
    reinterpret_cast<uint4*>(out)[g] = make_uint4(half_bits(a.x) | half_bits(a.y) << 16, half_bits(a.z) | half_bits(a.w) << 16,
                                                  half_bits(b.x) | half_bits(b.y) << 16, half_bits(b.z) | half_bits(b.w) << 16);
  }
  // The last count % 8 values, one each, by the first threads of block 0.
  if (blockIdx.x == 0 && threadIdx.x < count % 8) {
    const int64_t i = groups * 8 + threadIdx.x;
    out[i] = static_cast<uint16_t>(half_bits(in[i]));
  }
}

}  // namespace

void launch_images_to_half(const float* in, int64_t count, uint16_t* out, cudaStream_t stream) {
  if (count <= 0) return;
  int device = 0, sm_count = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  // Enough blocks to fill the GPU (8 per SM), no more than there are groups of eight values.
  const int64_t groups = std::max<int64_t>(1, count / 8);
  const int blocks = static_cast<int>(std::min<int64_t>(int64_t{8} * sm_count, (groups + kThreads - 1) / kThreads));
  images_to_half<<<blocks, kThreads, 0, stream>>>(in, count, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace gpu
}  // namespace facegen
