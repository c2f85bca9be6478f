// model_spec.hpp: the shape of one generator network, read from its model file at run time.
//
// Every network facegen runs is the same family (the DCGAN generator), S = 3, 4 or 5 stages for
// images of 32, 64 or 128 pixels a side:
//   z (nz) -> projection -> (4, 4, C0); for stage i = 0..S-1: x = tconv_i(relu(bn_i(x))); then tanh
// with feature maps (H, W, C), C fastest, each stage doubling H and W and halving C, the last one
// making the image's nc channels (g = base_channels):
//   S = 3 (32x32):   (4, 4, 4g) -> (8, 8, 2g) -> (16, 16, g) -> (32, 32, nc)
//   S = 4 (64x64):   (4, 4, 8g) -> (8, 8, 4g) -> (16, 16, 2g) -> (32, 32, g) -> (64, 64, nc)
//   S = 5 (128x128): (4, 4, 16g) -> (8, 8, 8g) -> ... -> (64, 64, g) -> (128, 128, nc)
// Every transposed convolution is stride 2 with a k x k kernel, writing input pixel i to output
// rows 2i + kh - 1 (kh = 0..k-1), cropped to (2h, 2w): k = 5 is the SHPC facegen alignment
// (TensorFlow's SAME), k = 4 is PyTorch's ConvTranspose2d(k=4, stride=2, padding=1).
// The projection is the PyTorch generator's first ConvTranspose2d(nz, C0, 4, 1, 0) on a 1x1
// input, i.e. a (nz) x (4*4*C0) matrix. The SHPC network is {nz 100, g 64, nc 3, k 5, biases, 64x64}.
#pragma once

#include <cstdint>
#include <string>

namespace facegen {

constexpr int kImageSizes[] = {32, 64, 128};  // the images' pixels a side that facegen runs
constexpr int kMaxStages = 5;          // transposed convolutions after the projection (128x128 images)
constexpr int kDefaultImageSize = 64;  // the SHPC network's and the PyTorch tutorial's images
constexpr int kMaxFirstChannels = 2048;  // C0, the widest feature map (ngf 256 at 64x64, 128 at 128x128)

struct ModelSpec {
  int latent_dim = 100;     // nz: 1..1024
  int base_channels = 64;   // g (PyTorch's ngf): the last hidden stage's channels; 16..256, multiple of 16
  int image_channels = 3;   // nc: 1 (grey) or 3 (RGB)
  int kernel_size = 5;      // 5 (SHPC alignment) or 4 (padding 1)
  bool has_bias = true;     // projection and transposed convolutions add a bias
  int image_size = kDefaultImageSize;  // pixels a side: 32, 64 or 128

  // Transposed convolutions after the projection: 3, 4 or 5 (log2(image_size) - 2).
  constexpr int stages() const {
    int s = 0;
    while ((4 << s) < image_size) ++s;
    return s;
  }
  // Channels of the feature map before stage i (i = 0..stages()-1), or of the image (i = stages()).
  constexpr int stage_channels(int i) const {
    return i >= stages() ? image_channels : base_channels << (stages() - 1 - i);
  }
  // Height = width of the feature map before stage i, or of the image (i = stages()).
  static constexpr int stage_size(int i) { return 4 << i; }
  constexpr int proj_outputs() const { return 16 * stage_channels(0); }
  constexpr int image_pixels() const { return image_size * image_size; }
  constexpr int image_values() const { return image_pixels() * image_channels; }

  friend constexpr bool operator==(const ModelSpec& a, const ModelSpec& b) {
    return a.latent_dim == b.latent_dim && a.base_channels == b.base_channels &&
           a.image_channels == b.image_channels && a.kernel_size == b.kernel_size &&
           a.has_bias == b.has_bias && a.image_size == b.image_size;
  }
  friend constexpr bool operator!=(const ModelSpec& a, const ModelSpec& b) { return !(a == b); }
};

// Where each block of a network's flat float layout starts (generator/network.hpp describes the
// layout; this is its one definition, for the loader and the GPU engines alike), and the total.
struct WeightOffsets {
  int64_t proj_weight = 0, proj_bias = 0;
  // Per stage (0..stages()-1); bn: beta, with gamma, mean, var following.
  int64_t bn[kMaxStages] = {}, tconv_weight[kMaxStages] = {}, tconv_bias[kMaxStages] = {};
  int64_t total = 0;  // floats of the whole network

  constexpr explicit WeightOffsets(const ModelSpec& s) {
    int64_t o = int64_t{s.latent_dim} * s.proj_outputs();
    proj_bias = o;
    o += s.proj_outputs();
    for (int i = 0; i < s.stages() && i < kMaxStages; ++i) {
      bn[i] = o;
      o += 4 * int64_t{s.stage_channels(i)};
      tconv_weight[i] = o;
      o += int64_t{s.kernel_size} * s.kernel_size * s.stage_channels(i + 1) * s.stage_channels(i);
      tconv_bias[i] = o;
      o += s.stage_channels(i + 1);
    }
    total = o;
  }
};

// Why a spec is outside what facegen runs, on the CPU and the GPU alike (nz 1..1024; g 16..256, a
// multiple of 16; nc 1 or 3; k 4 or 5; images 32, 64 or 128 pixels a side; the first feature map
// at most kMaxFirstChannels channels), as the end of a sentence ("nz is 0, but it must be 1 to
// 1024"); "" when it is fine.
std::string model_spec_problem(const ModelSpec& spec);

// The SHPC facegen network of network.bin files (the shape common/model_shape.hpp spells out).
constexpr ModelSpec kShpcSpec{100, 64, 3, 5, true};
// The PyTorch DCGAN tutorial's generator, the shape of the shipped faces model.
constexpr ModelSpec kTutorialSpec{100, 64, 3, 4, false};

}  // namespace facegen
