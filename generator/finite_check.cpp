// finite_check.cpp: see finite_check.hpp. The scan is one pass over each chunk's images; the
// layer-by-layer search runs only when that pass finds a non-finite value.
#include "generator/finite_check.hpp"

#include <cmath>
#include <vector>

#include "common/errors.hpp"
#include "generator/reference_forward.hpp"

namespace facegen {
namespace {

bool all_finite(const std::vector<float>& values) {
  for (float v : values) {
    if (!std::isfinite(v)) return false;
  }
  return true;
}

// Whether an image has a NaN or Inf; *saturated: whether every value is exactly +-1 (the tanh of an
// Inf, or of values merely large).
bool image_finite(const float* image, int values, bool* saturated) {
  bool finite = true, all_one = true;
  for (int v = 0; v < values; ++v) {
    finite &= std::isfinite(image[v]);
    all_one &= std::fabs(image[v]) == 1.0f;
  }
  *saturated = all_one;
  return finite;
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
                           const float* images, int64_t count, int64_t first_index) {
  bool traced_saturated = false;  // a model may saturate every image: one such trace per chunk
  for (int64_t i = 0; i < count; ++i) {
    bool saturated = false;
    const int values = net.spec().image_values();
    const bool finite = image_finite(images + i * values, values, &saturated);
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
