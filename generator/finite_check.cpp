// finite_check.cpp: see finite_check.hpp. The scan is one pass over each chunk's images; the
// layer-by-layer search runs only when that pass finds a non-finite value.
#include "generator/finite_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "common/errors.hpp"
#include "common/text_format.hpp"
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

// What the checks found of one image: kNonFinite (a NaN or Inf), kSaturated (every value exactly +-1:
// the tanh of an Inf, or of values merely large), kOutlier (its latent has a value beyond
// kLatentBound), or none of these.
constexpr uint8_t kNonFinite = kImageNonFinite, kSaturated = kImageSaturated, kOutlier = 4;

// Where a latent's values may lie and still be blamed on the model. A standard normal value passes
// 8.3 in magnitude once in 10^16 draws, so a latent of N(0, 1) values (or one scaled up twice, or an
// interpolation between such) stays within 16; anything beyond is no Gaussian latent.
constexpr float kLatentBound = 16.0f;
constexpr uint32_t kLatentBoundBits = 0x41800000u;  // 16.0f

// Whether a latent (nz) has a value beyond kLatentBound, on the bits so that the loop vectorises.
bool has_outlier(const float* latent, int nz) {
  uint32_t beyond = 0;
  for (int v = 0; v < nz; ++v) {
    uint32_t bits;
    std::memcpy(&bits, latent + v, sizeof bits);
    beyond |= (bits & 0x7fffffffu) > kLatentBoundBits;
  }
  return beyond != 0;
}

// Index of the value of `latent` (nz) with the largest magnitude, if it is beyond kLatentBound; else -1.
int latent_outlier(const float* latent, int nz) {
  int worst = -1;
  for (int v = 0; v < nz; ++v) {
    if (std::fabs(latent[v]) > kLatentBound && (worst < 0 || std::fabs(latent[v]) > std::fabs(latent[worst]))) worst = v;
  }
  return worst;
}

// The sentence that blames image `image`'s latent for its non-finite output, or "" when the latent is an
// ordinary one or the model overflows on it even clamped. `layer`: the reference's first non-finite
// layer ("": the reference is finite, the backend's arithmetic overflowed).
std::string blame_latent(const Network& net, const float* latent, int64_t image, const std::string& layer) {
  const int nz = net.spec().latent_dim;
  const int worst = latent_outlier(latent, nz);
  if (worst < 0) return "";
  if (!layer.empty()) {
    std::vector<float> clamped(latent, latent + nz);  // (nz)
    for (float& v : clamped) v = std::clamp(v, -kLatentBound, kLatentBound);
    if (!first_non_finite_layer(net, clamped.data()).empty()) return "";  // the model overflows anyway
  }
  char value[32];
  std::snprintf(value, sizeof value, "%.7g", static_cast<double>(latent[worst]));
  const std::string effect =
      layer.empty() ? "the backend's arithmetic overflows to NaN or Inf on it (try --precision fp32)"
                    : "it makes layer " + layer + "'s output NaN or Inf, which the model avoids with the latent clamped to " +
                          "[-16, 16]";
  return "latent " + with_commas(image + 1) + " of the input (image " + std::to_string(image) + "), value " +
         std::to_string(worst + 1) + " of " + std::to_string(nz) + ", is " + value +
         ", far outside a Gaussian latent's range: " + effect;
}

}  // namespace

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

void scan_images(const float* images, int64_t count, int values, int threads, uint8_t* flags) {
  parallel_for(count, threads, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) flags[i] = scan_image(images + i * values, values);
  });
}

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
  std::vector<uint8_t> flags(static_cast<size_t>(std::max<int64_t>(count, 0)));  // (count)
  scan_images(images, count, net.spec().image_values(), threads, flags.data());
  require_finite_flags(net, source, latents, flags.data(), count, first_index, threads);
}

namespace {

// The images the check traces, in image order so that the message names the first bad image whatever
// the thread count: the run's first (tanh hides an Inf before it), `extreme` (-1: none), each non-finite
// one, and the first saturated one. found (count): each image's flags and kOutlier; latent_at(i): its latent (nz).
void trace_in_order(const Network& net, const std::string& source, const uint8_t* found, int64_t count,
                    int64_t first_index, int64_t extreme, const std::function<const float*(int64_t)>& latent_at) {
  bool traced_saturated = false;  // a model may saturate every image: one such trace per chunk
  for (int64_t i = 0; i < count; ++i) {
    const bool saturated = found[i] & kSaturated;
    const bool finite = !(found[i] & kNonFinite);
    const bool first_of_run = first_index + i == 0;
    if (finite && !first_of_run && i != extreme && (!saturated || traced_saturated)) continue;
    traced_saturated |= saturated;
    const std::string image_text = "image " + std::to_string(first_index + i);
    const float* latent = latent_at(i);
    const std::string layer = first_non_finite_layer(net, latent);
    if (!layer.empty() || !finite) {
      const std::string blame = blame_latent(net, latent, first_index + i, layer);
      if (!blame.empty()) throw UserError(blame);
    }
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

}  // namespace

void require_finite_flags(const Network& net, const std::string& source, const float* latents,
                          const uint8_t* flags, int64_t count, int64_t first_index, int threads) {
  std::vector<uint8_t> found(static_cast<size_t>(std::max<int64_t>(count, 0)));  // (count): the images' flags and kOutlier
  const int nz = net.spec().latent_dim;
  parallel_for(count, threads, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) found[i] = uint8_t(flags[i] | (has_outlier(latents + i * nz, nz) ? kOutlier : 0));
  });
  // Of the latents beyond kLatentBound, the one with the largest value is traced too (a backend's tanh
  // or ReLU may hide what it did to the layers); one per chunk, as a file of such latents may be meant.
  int64_t extreme = -1;
  float extreme_value = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (!(found[i] & kOutlier)) continue;
    const float value = std::fabs(latents[i * nz + latent_outlier(latents + i * nz, nz)]);
    if (value > extreme_value) {
      extreme = i;
      extreme_value = value;
    }
  }
  trace_in_order(net, source, found.data(), count, first_index, extreme, [&](int64_t i) { return latents + i * nz; });
}

void require_finite_drawn(const Network& net, const std::string& source,
                          const std::function<void(int64_t i, float* out)>& latent_of, const uint8_t* flags,
                          int64_t count, int64_t first_index) {
  std::vector<float> latent(static_cast<size_t>(net.spec().latent_dim));  // (nz): the image traced now
  trace_in_order(net, source, flags, count, first_index, -1, [&](int64_t i) {
    latent_of(i, latent.data());
    return static_cast<const float*>(latent.data());
  });
}

}  // namespace facegen
