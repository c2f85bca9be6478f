// image_half.hpp: images (float32) -> float16 on the GPU, the step before a bf16 run's download
// (generator/gpu_pipeline.hpp says why those runs bring float16 over PCIe).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace facegen {
namespace gpu {

// out[i] = in[i] rounded to the nearest float16, ties to even (common/half_float.hpp's
// float_to_half is the CPU reference), for i < count. in and out: device memory, 16-byte aligned.
void launch_images_to_half(const float* in, int64_t count, uint16_t* out, cudaStream_t stream);

}  // namespace gpu
}  // namespace facegen
