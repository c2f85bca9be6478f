// tconv.cu: the stride-2 5x5 SAME transposed convolution on the GPU.
//
// in (n, h, w, c_in) -> out (n, 2h, 2w, c_out), both channels fastest. One thread per output
// element (image, oy, ox, k), k fastest, gathering over the (up to 3x3) taps that reach it. The
// weight is read in the layout (5, 5, c_in, c_out), c_out fastest, so a warp's weight loads are
// consecutive floats and its input loads are broadcasts. Summation order matches tconv_cpu: eight
// partial sums, lane l taking the channels c with c % 8 == l over the taps in (kh, kw) order,
// added as a fixed tree, then the bias.
#include <cstdint>

#include "generator/network.hpp"
#include "kernels/cuda_check.cuh"
#include "kernels/layers_cuda.hpp"

namespace facegen {

namespace {

constexpr int kLanes = 8;  // the CPU layer's lane count (layers_cpu.cpp); keep them equal

__global__ void tconv_kernel(const float* __restrict__ in, int64_t n, int h, int w, int c_in,
                             const float* __restrict__ weight_t, const float* __restrict__ bias,
                             int c_out, float* __restrict__ out) {
  const int oh = 2 * h, ow = 2 * w;
  const int64_t count = n * oh * ow * c_out;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int k = static_cast<int>(idx % c_out);
    int64_t rest = idx / c_out;
    const int ox = static_cast<int>(rest % ow);
    rest /= ow;
    const int oy = static_cast<int>(rest % oh);
    const int64_t image = rest / oh;

    float acc[kLanes] = {};
    // Tap kh reaches output row oy from input row (oy + 1 - kh) / 2, when that is whole and inside.
    for (int kh = (oy + 1) & 1; kh < kTaps; kh += 2) {
      const int i = (oy + 1 - kh) / 2;
      if (i < 0 || i >= h) continue;
      for (int kw = (ox + 1) & 1; kw < kTaps; kw += 2) {
        const int j = (ox + 1 - kw) / 2;
        if (j < 0 || j >= w) continue;
        const float* x = in + ((image * h + i) * w + j) * c_in;                     // (c_in)
        const float* wt = weight_t + int64_t(kh * kTaps + kw) * c_in * c_out + k;  // stride c_out
        int c = 0;
        for (; c + kLanes <= c_in; c += kLanes) {
#pragma unroll
          for (int l = 0; l < kLanes; ++l) acc[l] += x[c + l] * wt[int64_t(c + l) * c_out];
        }
#pragma unroll
        for (int l = 0; l < kLanes; ++l)
          if (c + l < c_in) acc[l] += x[c + l] * wt[int64_t(c + l) * c_out];
      }
    }
    const float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    out[idx] = sum + bias[k];
  }
}

}  // namespace

void tconv_weight_for_cuda(const float* weight, int c_in, int c_out, float* weight_t) {
  // weight (25, c_out, c_in) -> weight_t (25, c_in, c_out)
  for (int tap = 0; tap < kTaps * kTaps; ++tap) {
    const float* src = weight + int64_t(tap) * c_out * c_in;
    float* dst = weight_t + int64_t(tap) * c_in * c_out;
    for (int k = 0; k < c_out; ++k)
      for (int c = 0; c < c_in; ++c) dst[int64_t(c) * c_out + k] = src[int64_t(k) * c_in + c];
  }
}

void tconv_cuda(const float* in, int64_t n, int h, int w, int c_in, const float* weight_t,
                const float* bias, int c_out, float* out, cudaStream_t stream) {
  const int64_t count = n * 4 * int64_t(h) * w * c_out;
  if (count <= 0) return;
  constexpr int kThreads = 256;
  tconv_kernel<<<grid_blocks(count, kThreads), kThreads, 0, stream>>>(in, n, h, w, c_in,
                                                                        weight_t, bias, c_out, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace facegen
