// image_output.hpp: the last step of a batch on the GPU, between the network and the download: each
// image's scan for NaN, Inf and saturation, and its values in the form that crosses PCIe.
//
// CPU references, which the bytes equal exactly: scan_image (generator/finite_check.hpp),
// float_to_half (common/half_float.hpp), image_to_rgb8 and channel_to_byte (formats/output_format.hpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace facegen {
namespace gpu {

// What finish_images writes besides the flags.
enum class ImageOutput {
  None,     // nothing: the float32 images download as they are
  Float16,  // out (n, values) float16, to nearest, ties to even
  Rgb8,     // out (n, S, S, 3) bytes: channel_to_byte of each value, a grey value repeated
};

// images (n, values) float32 in device memory, values = S * S * channels (channels 1 or 3, S the
// images' pixels a side). For each image i:
// flags[i] = scan_image of the values the host receives (the float16-rounded ones where round_half),
// and out's image i as `output` says. round_half: Rgb8 converts the float16-rounded values (a bf16 run's
// 8-bit pixels equal those made on the host from its float16 download); Float16 implies it. out,
// images: 16-byte aligned.
void launch_finish_images(const float* images, int n, int values, int channels, ImageOutput output, bool round_half,
                          void* out, uint8_t* flags, cudaStream_t stream);

}  // namespace gpu
}  // namespace facegen
