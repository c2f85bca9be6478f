// model_spec.cpp: the range of specs facegen runs (see model_spec.hpp).
#include "common/model_spec.hpp"

namespace facegen {

std::string model_spec_problem(const ModelSpec& spec) {
  if (spec.latent_dim < 1 || spec.latent_dim > 1024)
    return "nz is " + std::to_string(spec.latent_dim) + ", but it must be 1 to 1024";
  if (spec.base_channels < 16 || spec.base_channels > 256 || spec.base_channels % 16 != 0)
    return "ngf is " + std::to_string(spec.base_channels) + ", but it must be a multiple of 16 from 16 to 256";
  if (spec.image_channels != 1 && spec.image_channels != 3)
    return "nc is " + std::to_string(spec.image_channels) + ", but it must be 1 (grey) or 3 (RGB)";
  if (spec.kernel_size != 4 && spec.kernel_size != 5)
    return "kernel_size is " + std::to_string(spec.kernel_size) + ", but it must be 4 or 5";
  bool known_size = false;
  for (int size : kImageSizes) known_size = known_size || spec.image_size == size;
  if (!known_size)
    return "image_size is " + std::to_string(spec.image_size) + ", but it must be 32, 64 or 128";
  if (spec.stage_channels(0) > kMaxFirstChannels) {
    const int most = kMaxFirstChannels >> (spec.stages() - 1);
    return "ngf is " + std::to_string(spec.base_channels) + ", but a " + std::to_string(spec.image_size) + "x" +
           std::to_string(spec.image_size) + " generator's first layer then has " +
           std::to_string(spec.stage_channels(0)) + " channels, more than " + std::to_string(kMaxFirstChannels) +
           ": ngf must be at most " + std::to_string(most) + " at this size";
  }
  return "";
}

}  // namespace facegen
