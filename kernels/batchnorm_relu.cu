// batchnorm_relu.cu: inference batch norm followed by ReLU on the GPU, one thread per value.
//
// in, out (pixels, channels), channels fastest; out may equal in. Computes
// (x - mean) * (gamma / sqrt(var + eps)) + beta like batchnorm_relu_cpu, so the two agree exactly
// up to FMA contraction.
#include "generator/network.hpp"
#include "kernels/cuda_check.cuh"
#include "kernels/layers_cuda.hpp"

namespace facegen {

namespace {

__global__ void batchnorm_relu_kernel(const float* in, int64_t count, int channels,
                                      const float* __restrict__ beta,
                                      const float* __restrict__ gamma,
                                      const float* __restrict__ mean,
                                      const float* __restrict__ var, float* out) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(idx % channels);
    const float scale = gamma[c] / sqrtf(var[c] + kBatchNormEps);
    const float v = (in[idx] - mean[c]) * scale + beta[c];
    out[idx] = v > 0.0f ? v : 0.0f;
  }
}

}  // namespace

void batchnorm_relu_cuda(const float* in, int64_t pixels, int channels, const float* beta,
                         const float* gamma, const float* mean, const float* var, float* out,
                         cudaStream_t stream) {
  const int64_t count = pixels * channels;
  if (count <= 0) return;
  constexpr int kThreads = 256;
  batchnorm_relu_kernel<<<grid_blocks(count, kThreads), kThreads, 0, stream>>>(
      in, count, channels, beta, gamma, mean, var, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace facegen
