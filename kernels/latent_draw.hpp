// latent_draw.hpp: drawn latents made on the GPU, each value's float as the host's recipe_value makes it
// (common/latent_draw.hpp) wherever the GPU can vouch for it, and the list of those it cannot
// (kernels/latent_draw.cuh), which the caller makes on the host and patches in
// (generator/device_latents.hpp).
#pragma once

#include <cuda_runtime.h>

#include "common/latent_draw.hpp"

namespace facegen {
namespace gpu {

// Images [0, n) of `recipe` (its seeds, where it has them, in device memory) into out (n, nz) on
// `stream`. The index (image * nz + value) of each value the GPU cannot vouch for is stored at
// uncertain[k] (room for n * nz, device-accessible), k counted by *count (device memory, zeroed by
// the caller first). n * nz < 2^32.
void launch_draw_latents(const LatentRecipe& recipe, int n, int nz, float* out, unsigned* count, unsigned* uncertain,
                         double agreement, cudaStream_t stream);

// out[where[k]] = values[k] for k < *count (device memory): the host's values of the uncertain ones.
void launch_patch_latents(const unsigned* count, const unsigned* where, const float* values, float* out,
                          cudaStream_t stream);

}  // namespace gpu
}  // namespace facegen
