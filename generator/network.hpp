// network.hpp: a generator's weights and its shape (ModelSpec), in one flat float vector.
//
// The internal layout is the network.bin layout, generalised to any ModelSpec (nz, g, nc, k and S =
// spec.stages() stages; C_i = spec.stage_channels(i), C_S = nc):
//   proj weight (nz, 16 C0) (in, out), outputs in (4, 4, C0) HWC order; proj bias (16 C0)
//   then for each stage i = 0..S-1: bn_i beta, gamma, mean, var (C_i each),
//   tconv_{i+1} weight (k, k, C_{i+1}, C_i) (kh, kw, out, in), bias (C_{i+1})
// A model without biases stores them as zeros. For the SHPC network (kShpcSpec) this is exactly a
// network.bin file: 5,137,283 floats. Forward pass for one latent z (nz): x = z·W + b viewed as
// (4, 4, C0); for i = 0..S-1: x = tconv_i(relu(bn_i(x))); then tanh. Feature maps are (H, W, C),
// C fastest, doubling H and W at each stage: (4, 4, C0) -> ... -> (image_size, image_size, nc)
// (common/model_spec.hpp lists each size's chain).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/model_shape.hpp"
#include "common/model_spec.hpp"
#include "latents/input_file.hpp"

namespace facegen {

class Network {
 public:
  Network() : Network(kShpcSpec) {}
  explicit Network(const ModelSpec& spec);  // all zeros, the right size
  // Throws std::invalid_argument on a wrong size or a spec outside model_spec_problem's ranges.
  Network(const ModelSpec& spec, std::vector<float> floats);

  const ModelSpec& spec() const { return spec_; }

  const float* proj_weight() const;  // (nz, 16 C0), out fastest
  const float* proj_bias() const;    // (16 C0)
  BatchNormView batchnorm(int stage) const;  // stage 0..S-1: the batch norm before tconv `stage`
  TConvView tconv(int stage) const;          // stage 0..S-1: tconv1..tconvS

  const std::vector<float>& floats() const { return floats_; }
  std::vector<float>& mutable_floats() { return floats_; }

  // Offsets (in floats) of each block inside floats(), in layout order.
  int64_t proj_weight_offset() const { return 0; }
  int64_t proj_bias_offset() const;
  int64_t batchnorm_offset(int stage) const;  // beta; gamma, mean, var follow, `channels` apart
  int64_t tconv_weight_offset(int stage) const;
  int64_t tconv_bias_offset(int stage) const;

  // Floats of a network of this spec (5,137,283 for kShpcSpec).
  static int64_t float_count(const ModelSpec& spec);

 private:
  ModelSpec spec_;
  std::vector<float> floats_;
};

// The spec in words, e.g. "nz 100, ngf 64, nc 3, 5x5 kernels, with biases, 64x64 images".
std::string describe_spec(const ModelSpec& spec);

// The shape of the model in an open model file, without reading its weights, for what must be sized
// before the model is loaded (an MPI job's latent readers): a safetensors file's __metadata__, else
// kShpcSpec (a network.bin; a file that is not one is explained by load_network). Throws UserError.
ModelSpec read_model_spec(const InputFile& file);

// Reads and validates a model file: a safetensors file (generator/safetensors_model.hpp), told apart
// by its content or a name ending in .safetensors, or else a network.bin. Throws UserError naming the
// file and the problem: unreadable, a network.bin's wrong byte count (expected and actual), a NaN or
// Inf (which block or tensor, which index), var + eps <= 0, any flaw of a safetensors file, or a
// file that changed in place while it was read (input_file.hpp). Every byte comes through the one
// descriptor `file`: the spec read before and the weights are of one file, whatever happens to its
// path meanwhile.
Network load_network(const InputFile& file);

// The same for a path, opened once.
ModelSpec read_model_spec(const std::string& path);
Network load_network(const std::string& path);

// Throws UserError if any value is NaN or Inf or any batch-norm var + eps <= 0; `source` names the file.
void validate_network(const Network& net, const std::string& source);

// Writes a network of kShpcSpec as a network.bin, atomically (temporary file in the same directory,
// then rename); any other spec is a std::invalid_argument (network.bin holds the SHPC network only).
void save_network(const Network& net, const std::string& path);

// Seeded random weights at scales that keep activations near unit variance, so the images are
// neither flat nor saturated at +-1. Same seed, same bytes, on every machine.
Network make_random_network(const ModelSpec& spec, uint64_t seed);
inline Network make_random_network(uint64_t seed) { return make_random_network(kShpcSpec, seed); }

}  // namespace facegen
