// tanh.cu: the generator's final tanh on the GPU, elementwise over the (n, 64, 64, 3) images.
#include "kernels/cuda_check.cuh"
#include "kernels/layers_cuda.hpp"

namespace facegen {

namespace {

__global__ void tanh_kernel(const float* in, int64_t count, float* out) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count;
       idx += int64_t(gridDim.x) * blockDim.x)
    out[idx] = tanhf(in[idx]);
}

}  // namespace

void tanh_cuda(const float* in, int64_t count, float* out, cudaStream_t stream) {
  if (count <= 0) return;
  constexpr int kThreads = 256;
  tanh_kernel<<<grid_blocks(count, kThreads), kThreads, 0, stream>>>(in, count, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace facegen
