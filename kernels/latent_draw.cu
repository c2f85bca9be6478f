// latent_draw.cu: drawn latents on the GPU (see latent_draw.hpp). One thread a value: its key, its
// draws (one untruncated; up to kTruncationDraws truncated) and its float.
#include "kernels/latent_draw.hpp"

#include <cstdint>

#include "common/cuda_check.cuh"
#include "kernels/latent_draw.cuh"

namespace facegen {
namespace gpu {
namespace {

constexpr int kThreads = 256;

__global__ void draw_latents_kernel(LatentRecipe recipe, int n, int nz, float* __restrict__ out, unsigned* count,
                                    unsigned* uncertain, double agreement) {
  const int64_t values = int64_t{n} * nz;
  for (int64_t at = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; at < values; at += int64_t{gridDim.x} * blockDim.x) {
    const int image = static_cast<int>(at / nz), value = static_cast<int>(at % nz);
    DeviceBoxMuller box_muller{agreement};
    out[at] = recipe_float(recipe, image, value, box_muller);
    if (box_muller.uncertain) uncertain[atomicAdd(count, 1u)] = static_cast<unsigned>(at);
  }
}

__global__ void patch_latents_kernel(const unsigned* count, const unsigned* where, const float* values, float* out) {
  const unsigned patches = *count;
  for (unsigned k = blockIdx.x * blockDim.x + threadIdx.x; k < patches; k += gridDim.x * blockDim.x) {
    out[where[k]] = values[k];
  }
}

}  // namespace

void launch_draw_latents(const LatentRecipe& recipe, int n, int nz, float* out, unsigned* count, unsigned* uncertain,
                         double agreement, cudaStream_t stream) {
  const int64_t values = int64_t{n} * nz;
  if (values <= 0) return;
  draw_latents_kernel<<<grid_blocks(values, kThreads), kThreads, 0, stream>>>(recipe, n, nz, out, count, uncertain,
                                                                             agreement);
  CUDA_CHECK_LAUNCH();
}

void launch_patch_latents(const unsigned* count, const unsigned* where, const float* values, float* out,
                          cudaStream_t stream) {
  patch_latents_kernel<<<8, kThreads, 0, stream>>>(count, where, values, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace gpu
}  // namespace facegen
