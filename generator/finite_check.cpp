// finite_check.cpp: see finite_check.hpp. The scan is one pass over each chunk's images; the
// layer-by-layer search runs only when that pass finds a non-finite value.
#include "generator/finite_check.hpp"

#include <cmath>
#include <vector>

#include "common/errors.hpp"
#include "kernels/layers_cpu.hpp"

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
bool image_finite(const float* image, bool* saturated) {
  bool finite = true, all_one = true;
  for (int v = 0; v < kImageValues; ++v) {
    finite &= std::isfinite(image[v]);
    all_one &= std::fabs(image[v]) == 1.0f;
  }
  *saturated = all_one;
  return finite;
}

}  // namespace

std::string first_non_finite_layer(const Network& net, const float* latent) {
  const int threads = 1;  // one image, on the error path only
  std::vector<float> x(kProjOutputs);  // (4, 4, 512)
  projection_cpu(latent, 1, kLatentDim, kProjOutputs, net.proj_weight(), net.proj_bias(), x.data(), threads);
  if (!all_finite(x)) return "proj";
  for (int stage = 0; stage < kNumStages; ++stage) {
    const BatchNormView bn = net.batchnorm(stage);
    const int size = kStageSize[stage];
    batchnorm_relu_cpu(x.data(), int64_t{size} * size, bn.channels, bn.beta, bn.gamma, bn.mean, bn.var, x.data(),
                       threads);
    if (!all_finite(x)) return "bn" + std::to_string(stage);
    const TConvView conv = net.tconv(stage);
    std::vector<float> out(static_cast<size_t>(4) * size * size * conv.c_out);  // (2h, 2h, c_out)
    tconv_cpu(x.data(), 1, size, size, conv.c_in, conv.kernel_size, conv.weight, conv.bias,
              conv.c_out, out.data(), threads);
    x.swap(out);
    if (!all_finite(x)) return "tconv" + std::to_string(stage + 1);
  }
  tanh_cpu(x.data(), static_cast<int64_t>(x.size()), x.data(), threads);
  return all_finite(x) ? "" : "tanh";
}

void require_finite_images(const Network& net, const std::string& source, const float* latents,
                           const float* images, int64_t count, int64_t first_index) {
  bool traced_saturated = false;  // a model may saturate every image: one such trace per chunk
  for (int64_t i = 0; i < count; ++i) {
    bool saturated = false;
    const bool finite = image_finite(images + i * kImageValues, &saturated);
    const bool first_of_run = first_index + i == 0;  // traced always: tanh hides an Inf before it
    if (finite && !first_of_run && (!saturated || traced_saturated)) continue;
    traced_saturated |= saturated;
    const std::string image_text = "image " + std::to_string(first_index + i);
    const std::string layer = first_non_finite_layer(net, latents + i * kLatentDim);
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
