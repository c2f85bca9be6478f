// image_output.cu: see image_output.hpp. One block per image; each thread takes groups of four values
// (one 16-byte load), so loads and stores stay coalesced for nc = 1 and 3.
#include "kernels/image_output.hpp"

#include <cuda_fp16.h>

#include "common/cuda_check.cuh"
#include "generator/finite_check.hpp"

namespace facegen {
namespace gpu {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ uint32_t half_bits(float x) { return __half_as_ushort(__float2half_rn(x)); }
__device__ __forceinline__ float rounded_to_half(float x) { return __half2float(__float2half_rn(x)); }

// channel_to_byte (output_format.hpp), with every operation rounded as the host's: (v + 1) / 2 * 255
// (the halving is exact either way), truncated, clamped to [0, 255], NaN to 0.
__device__ __forceinline__ uint32_t channel_byte(float v) {
  const float scaled = __fmul_rn(__fmul_rn(__fadd_rn(v, 1.0f), 0.5f), 255.0f);
  float c = scaled > 0.0f ? scaled : 0.0f;
  c = c < 255.0f ? c : 255.0f;
  return static_cast<uint32_t>(static_cast<int>(c));
}

// scan_image's two tests on one value's bits (finite_check.cpp).
__device__ __forceinline__ void scan_value(float v, uint32_t& non_finite, uint32_t& not_one) {
  const uint32_t bits = __float_as_uint(v);
  non_finite |= (bits & 0x7f800000u) == 0x7f800000u;
  not_one |= (bits & 0x7fffffffu) != 0x3f800000u;
}

template <ImageOutput kOutput>
__global__ void __launch_bounds__(kThreads)
finish_images(const float* __restrict__ images,  // (n, values)
              int values, bool grey, bool round_half,
              void* __restrict__ out,             // (n, values) float16, (n, S, S, 3) bytes, or unused
              uint8_t* __restrict__ flags) {      // (n)
  const int64_t image = blockIdx.x;
  const float4* in = reinterpret_cast<const float4*>(images + image * values);
  const int groups = values / 4;
  uint32_t non_finite = 0, not_one = 0;
  for (int g = threadIdx.x; g < groups; g += kThreads) {
    float4 v = in[g];
    if (round_half || kOutput == ImageOutput::Float16) {
      v = make_float4(rounded_to_half(v.x), rounded_to_half(v.y), rounded_to_half(v.z), rounded_to_half(v.w));
    }
    scan_value(v.x, non_finite, not_one);
    scan_value(v.y, non_finite, not_one);
    scan_value(v.z, non_finite, not_one);
    scan_value(v.w, non_finite, not_one);
    if constexpr (kOutput == ImageOutput::Float16) {
      // Value 2k in the low half of word k (little-endian, as the host reads them).
      reinterpret_cast<uint2*>(out)[image * groups + g] =
          make_uint2(half_bits(v.x) | half_bits(v.y) << 16, half_bits(v.z) | half_bits(v.w) << 16);
    } else if constexpr (kOutput == ImageOutput::Rgb8) {
      const uint32_t a = channel_byte(v.x), b = channel_byte(v.y), c = channel_byte(v.z), d = channel_byte(v.w);
      const int64_t pixels = grey ? values : values / 3;
      uint32_t* rgb = reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(out) + image * pixels * 3);
      if (grey) {  // four grey pixels: a a a b | b b c c | c d d d
        rgb[3 * g + 0] = a | a << 8 | a << 16 | b << 24;
        rgb[3 * g + 1] = b | b << 8 | c << 16 | c << 24;
        rgb[3 * g + 2] = c | d << 8 | d << 16 | d << 24;
      } else {
        rgb[g] = a | b << 8 | c << 16 | d << 24;
      }
    }
  }
  const int any_non_finite = __syncthreads_or(static_cast<int>(non_finite));
  const int any_not_one = __syncthreads_or(static_cast<int>(not_one));
  if (threadIdx.x == 0) {
    flags[image] = static_cast<uint8_t>((any_non_finite ? kImageNonFinite : 0) | (any_not_one ? 0 : kImageSaturated));
  }
}

}  // namespace

void launch_finish_images(const float* images, int n, int values, int channels, ImageOutput output, bool round_half,
                          void* out, uint8_t* flags, cudaStream_t stream) {
  if (n <= 0) return;
  const bool grey = channels == 1;
  switch (output) {
    case ImageOutput::None: finish_images<ImageOutput::None><<<n, kThreads, 0, stream>>>(images, values, grey, round_half, out, flags); break;
    case ImageOutput::Float16: finish_images<ImageOutput::Float16><<<n, kThreads, 0, stream>>>(images, values, grey, true, out, flags); break;
    case ImageOutput::Rgb8: finish_images<ImageOutput::Rgb8><<<n, kThreads, 0, stream>>>(images, values, grey, round_half, out, flags); break;
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace gpu
}  // namespace facegen
