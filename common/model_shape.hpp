// model_shape.hpp: the fixed shape of the SHPC facegen network (network.bin), as compile-time constants
// for the code tuned to it; common/model_spec.hpp describes any network of the family at run time.
//
// Forward pass for one latent z (100): x = z·W + b viewed as (4, 4, 512); for i = 0..3:
// x = tconv_i(relu(bn_i(x))); then tanh. Feature maps are (H, W, C), C fastest:
// (4,4,512) -> (8,8,256) -> (16,16,128) -> (32,32,64) -> (64,64,3).
// The views point into a network's weights (generator/network.hpp owns them and their file layout).
#pragma once

#include <cstdint>

#include "common/model_spec.hpp"

namespace facegen {

constexpr int kLatentDim = 100;
constexpr int kNumStages = 4;  // batch norm + ReLU + transposed convolution, four times
constexpr int kTaps = 5;       // transposed-convolution kernel is 5x5, stride 2
constexpr float kBatchNormEps = 1e-5f;
// Feature map before stage i is (kStageSize[i], kStageSize[i], kStageChannels[i]); index 4 is the image.
constexpr int kStageChannels[kNumStages + 1] = {512, 256, 128, 64, 3};
constexpr int kStageSize[kNumStages + 1] = {4, 8, 16, 32, 64};
constexpr int kProjOutputs = 4 * 4 * 512;  // 8192
constexpr int kImageSize = 64;
constexpr int kImageChannels = 3;
constexpr int kImageValues = kImageSize * kImageSize * kImageChannels;  // 12,288
constexpr int64_t kNetworkFloats = 5137283;
constexpr int64_t kNetworkBytes = kNetworkFloats * 4;  // 20,549,132
static_assert(kShpcSpec.latent_dim == kLatentDim && kShpcSpec.kernel_size == kTaps &&
                  kShpcSpec.stage_channels(0) == kStageChannels[0] &&
                  kShpcSpec.stage_channels(3) == kStageChannels[3] &&
                  kShpcSpec.stage_channels(4) == kImageChannels &&
                  kShpcSpec.proj_outputs() == kProjOutputs && kShpcSpec.image_values() == kImageValues,
              "the SHPC constants here and kShpcSpec describe one network");

// Inference batch norm parameters of one stage, each (channels).
struct BatchNormView {
  const float* beta;
  const float* gamma;
  const float* mean;
  const float* var;
  int channels;
};

// One stride-2 k x k transposed convolution: (n, h, h, c_in) -> (n, 2h, 2h, c_out), input pixel i
// writing output rows 2i + kh - 1 (kh = 0..k-1), cropped to 2h (common/model_spec.hpp).
struct TConvView {
  const float* weight;  // (k, k, c_out, c_in), c_in fastest
  const float* bias;    // (c_out); zeros for a model without biases
  int c_in;
  int c_out;
  int size_in;      // h = w of the input feature map
  int kernel_size;  // k: 5 (SHPC alignment) or 4 (PyTorch's padding 1)
};

}  // namespace facegen
