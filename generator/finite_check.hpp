// finite_check.hpp: a model whose weights are finite but huge must not give NaN images silently.
//
// The drivers (run/ and mpi/) pass every computed chunk of images through require_finite_images().
// An image with a NaN or Inf, the first image of each chunk whose every value is exactly +-1 (the
// tanh of an Inf), the image of each chunk whose latent has the largest value beyond +-16 (below),
// and the first image of the run always, is computed again from its latent by the
// CPU reference layers (generator/reference_forward.hpp), one layer at a time, single-threaded; the first
// layer whose output is not finite is named in a UserError: the model is bad (exit 1). Unless the
// latent is to blame: it has a value beyond +-16, which no Gaussian latent has (|z| > 8.3 comes once in
// 10^16 draws), and with its values clamped to [-16, 16] every layer is finite; then the latent is
// named, by its place in the input and its largest value (exit 1): "latent 6 of the input (image 5),
// value 17 of 100, is 3.4e+38, far outside a Gaussian latent's range: ...". A model that overflows on
// the clamped latent too is blamed as before. Works the same for every backend.
// Not caught, for a latent within +-16 other than the run's first: an Inf before tanh that becomes +-1
// beside ordinary values, or an overflow that a backend's ReLU turns into 0 (seen with the CPU backend
// for a latent of 1e20s through a model whose proj weights were scaled by 1e30); nor, beyond +-16, any
// but the largest latent of a chunk.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "generator/network.hpp"

namespace facegen {

// What the scan of one image finds, as bits: a NaN or Inf among its values, or every value exactly +-1.
// scan_images() is the CPU's scan and the reference of the GPU's (kernels/image_output.hpp).
constexpr uint8_t kImageNonFinite = 1, kImageSaturated = 2;
uint8_t scan_image(const float* image, int values);  // image: (values)
// flags[i] = scan_image(image i) for images (count, values), on `threads` threads (<= 0: every CPU).
void scan_images(const float* images, int64_t count, int values, int threads, uint8_t* flags);

// images (count, 64, 64, nc) were computed from latents (count, nz) by `net`, and their scan found
// `flags` (count); `first_index` is the index of image 0 in the whole run, `source` names the model
// file. Throws UserError on a non-finite value, naming the lowest-numbered bad image. The latents'
// scan is split over `threads` (<= 0: every CPU available_cpus() finds); what it decides does not
// depend on the split.
void require_finite_flags(const Network& net, const std::string& source, const float* latents,
                          const uint8_t* flags, int64_t count, int64_t first_index, int threads);
// The same for drawn latents that are not in host memory (a backend made them: StreamJob::recipe):
// latent_of(i, out) makes latent i (0 .. count-1) of the chunk (nz) for the images the check traces
// (the run's first, the first non-finite or saturated one). A drawn value never passes kLatentBound
// (|z| <= 8.58, common/latent_draw.hpp), so no image is blamed on its latent.
void require_finite_drawn(const Network& net, const std::string& source,
                          const std::function<void(int64_t i, float* out)>& latent_of, const uint8_t* flags,
                          int64_t count, int64_t first_index);
// scan_images, then require_finite_flags.
void require_finite_images(const Network& net, const std::string& source, const float* latents,
                           const float* images, int64_t count, int64_t first_index, int threads);

// The name of the first layer whose output is not finite for one latent (nz), e.g. "tconv4", or
// "" if every layer of the float32 reference is finite.
std::string first_non_finite_layer(const Network& net, const float* latent);

}  // namespace facegen
