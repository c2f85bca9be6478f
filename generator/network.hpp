// network.hpp: the facegen generator's weights, in the SHPC "facegen" network.bin layout.
//
// The file is headerless little-endian float32, 5,137,283 floats (20,549,132 bytes), in this order:
//   proj weight (100, 8192) (in, out), proj bias (8192)
//   bn0 beta, gamma, mean, var (512 each)
//   tconv1 weight (5, 5, 256, 512) (kh, kw, out, in), bias (256)
//   bn1 (256 each), tconv2 (5, 5, 128, 256) + (128), bn2 (128 each), tconv3 (5, 5, 64, 128) + (64),
//   bn3 (64 each), tconv4 (5, 5, 3, 64) + (3)
// Forward pass for one latent z (100): x = z·W + b viewed as (4, 4, 512); for i = 0..3:
// x = tconv_i(relu(bn_i(x))); then tanh. Feature maps are (H, W, C), C fastest:
// (4,4,512) -> (8,8,256) -> (16,16,128) -> (32,32,64) -> (64,64,3).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/model_shape.hpp"

namespace facegen {

class Network {
 public:
  Network();  // all zeros, the right size
  explicit Network(std::vector<float> floats);  // throws std::invalid_argument on a wrong size

  const float* proj_weight() const;  // (100, 8192), out fastest
  const float* proj_bias() const;    // (8192)
  BatchNormView batchnorm(int stage) const;  // stage 0..3: the batch norm before tconv `stage`
  TConvView tconv(int stage) const;          // stage 0..3: tconv1..tconv4 of the file

  const std::vector<float>& floats() const { return floats_; }
  std::vector<float>& mutable_floats() { return floats_; }

  // Offsets (in floats) of each block inside the file, in file order.
  static int64_t proj_weight_offset();
  static int64_t proj_bias_offset();
  static int64_t batchnorm_offset(int stage);  // beta; gamma, mean, var follow, `channels` apart
  static int64_t tconv_weight_offset(int stage);
  static int64_t tconv_bias_offset(int stage);

 private:
  std::vector<float> floats_;
};

// Reads and validates a network.bin. Throws UserError naming the file and the problem: unreadable,
// wrong byte count (expected and actual), a NaN or Inf (which block, which index), var + eps <= 0.
Network load_network(const std::string& path);

// Throws UserError if any value is NaN or Inf or any batch-norm var + eps <= 0; `source` names the file.
void validate_network(const Network& net, const std::string& source);

// Writes the network atomically (temporary file in the same directory, then rename).
void save_network(const Network& net, const std::string& path);

// Seeded random weights at scales that keep activations near unit variance, so the images are
// neither flat nor saturated at +-1. Same seed, same bytes, on every machine.
Network make_random_network(uint64_t seed);

}  // namespace facegen
