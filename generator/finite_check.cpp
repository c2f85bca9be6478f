// finite_check.cpp: see finite_check.hpp. The scan is one pass over each chunk's images; the
// layer-by-layer search runs only when that pass finds a non-finite value.
#include "generator/finite_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/errors.hpp"
#include "common/threads.hpp"
#include "generator/reference_forward.hpp"

namespace facegen {
namespace {

bool all_finite(const std::vector<float>& values) {
  for (float v : values) {
    if (!std::isfinite(v)) return false;
  }
  return true;
}

// What the scan of one image found: kNonFinite (a NaN or Inf), kSaturated (every value exactly +-1:
// the tanh of an Inf, or of values merely large), or neither.
constexpr uint8_t kNonFinite = 1, kSaturated = 2;

// Tests on the bits, so that the loop vectorises (the scan reads every image the GPU makes and ran at
// 1.6 ns a value as a scalar loop of isfinite and fabs, a third of a GPU's rate): a float is NaN or
// Inf when its exponent bits are all ones, and +-1 when its bits without the sign are those of 1.0f.
uint8_t scan_image(const float* image, int values) {
  uint32_t non_finite = 0, not_one = 0;
  for (int v = 0; v < values; ++v) {
    uint32_t bits;
    std::memcpy(&bits, image + v, sizeof bits);
    non_finite |= (bits & 0x7f800000u) == 0x7f800000u;
    not_one |= (bits & 0x7fffffffu) != 0x3f800000u;
  }
  return uint8_t((non_finite ? kNonFinite : 0) | (not_one ? 0 : kSaturated));
}

}  // namespace

std::string first_non_finite_layer(const Network& net, const float* latent) {
  const int threads = 1;  // one image, on the error path only
  std::string bad_layer;
  std::vector<float> image(static_cast<size_t>(net.spec().image_values()));  // (64, 64, nc)
  reference_forward(net, latent, 1, image.data(), threads,
                    [&](const std::string& layer, const std::vector<float>& values) {
                      if (all_finite(values)) return true;
                      bad_layer = layer;
                      return false;
                    });
  return bad_layer;
}

void require_finite_images(const Network& net, const std::string& source, const float* latents,
                           const float* images, int64_t count, int64_t first_index, int threads) {
  const int values = net.spec().image_values();
  std::vector<uint8_t> found(static_cast<size_t>(std::max<int64_t>(count, 0)));  // (count): scan_image's flags
  parallel_for(count, threads, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) found[i] = scan_image(images + i * values, values);
  });
  // In image order, so that the message names the first bad image whatever the thread count.
  bool traced_saturated = false;  // a model may saturate every image: one such trace per chunk
  for (int64_t i = 0; i < count; ++i) {
    const bool saturated = found[i] & kSaturated;
    const bool finite = !(found[i] & kNonFinite);
    const bool first_of_run = first_index + i == 0;  // traced always: tanh hides an Inf before it
    if (finite && !first_of_run && (!saturated || traced_saturated)) continue;
    traced_saturated |= saturated;
    const std::string image_text = "image " + std::to_string(first_index + i);
    const std::string layer = first_non_finite_layer(net, latents + i * net.spec().latent_dim);
    if (!layer.empty()) {
      throw UserError(source + " is a bad model: its weights are finite but the output of layer " + layer +
                      " is NaN or Inf for " + image_text);
    }
    if (!finite) {
      throw UserError(source + " gives a NaN or Inf in " + image_text +
                      " although every float32 reference layer is finite: its activations overflow the "
                      "backend's arithmetic (try --precision fp32)");
    }
  }
}

}  // namespace facegen
