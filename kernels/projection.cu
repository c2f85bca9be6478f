// projection.cu: the latent projection on the GPU, out (n, k_out) = z (n, k_in) · W + b.
//
// One thread per output element (image, o), o fastest, so a warp reads consecutive floats of a
// weight row and one broadcast z value. Sums over i in order, then adds the bias: the same order as
// projection_cpu.
#include "kernels/cuda_check.cuh"
#include "kernels/layers_cuda.hpp"

namespace facegen {

namespace {

// z (n, k_in); weight (k_in, k_out), k_out fastest; bias (k_out); out (n, k_out).
__global__ void projection_kernel(const float* __restrict__ z, int64_t n, int k_in, int k_out,
                                  const float* __restrict__ weight,
                                  const float* __restrict__ bias, float* __restrict__ out) {
  const int64_t count = n * k_out;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t image = idx / k_out;
    const int o = static_cast<int>(idx - image * k_out);
    const float* zi = z + image * k_in;
    float acc = 0.0f;
    for (int i = 0; i < k_in; ++i) acc += zi[i] * weight[int64_t(i) * k_out + o];
    out[idx] = acc + bias[o];
  }
}

}  // namespace

void projection_cuda(const float* z, int64_t n, int k_in, int k_out, const float* weight,
                     const float* bias, float* out, cudaStream_t stream) {
  if (n <= 0 || k_out <= 0) return;
  constexpr int kThreads = 256;
  projection_kernel<<<grid_blocks(n * k_out, kThreads), kThreads, 0, stream>>>(
      z, n, k_in, k_out, weight, bias, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace facegen
