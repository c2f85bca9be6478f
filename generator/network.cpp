// network.cpp: the internal layout of any ModelSpec, the network.bin loader, the validator, and
// seeded random weights.
//
// A network.bin is 5,137,283 little-endian float32 values with no header: the layout of kShpcSpec
// (network.hpp lists the blocks).
// Every block has a name used in messages ("proj weight", "bn1 var", "tconv2 weight"); a bad value
// is reported as block[index], the index counted inside the block.
#include "generator/network.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "commit/atomic_file.hpp"
#include "generator/safetensors_model.hpp"
#include "common/errors.hpp"
#include "common/text_format.hpp"

namespace facegen {
namespace {

static_assert(sizeof(float) == 4, "network.bin holds IEEE-754 binary32 values");
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "network.bin is little-endian; this code reads it with plain memory copies");

void check_stage(const ModelSpec& spec, int stage) {
  if (stage < 0 || stage >= spec.stages()) {
    throw std::out_of_range("network stage " + std::to_string(stage) + " is not in 0.." + std::to_string(spec.stages() - 1));
  }
}

int64_t tconv_weight_floats(const ModelSpec& spec, int stage) {
  return int64_t{spec.kernel_size} * spec.kernel_size * spec.stage_channels(stage + 1) *
         spec.stage_channels(stage);
}

// Index of the first NaN or Inf in values[0, n), or n. A model has 5 million floats and every run
// loads one, so the scan is branch-free over blocks (the compiler vectorizes it) and looks for the
// exact index only inside a block that holds one.
int64_t first_non_finite(const float* values, int64_t n) {
  constexpr int64_t kBlock = 1024;
  constexpr uint32_t kExponentMask = 0x7f800000u;  // all ones: Inf or NaN
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t end = std::min(n, start + kBlock);
    uint32_t found = 0;
    for (int64_t i = start; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, values + i, sizeof bits);
      found |= static_cast<uint32_t>((bits & kExponentMask) == kExponentMask);
    }
    if (found != 0) {
      for (int64_t i = start; i < end; ++i) {
        if (!std::isfinite(values[i])) return i;
      }
    }
  }
  return n;
}

struct Block {
  std::string name;
  int64_t offset;
  int64_t size;
};

// Every block of the layout, in order.
std::vector<Block> layout_blocks(const Network& net) {
  const ModelSpec& spec = net.spec();
  std::vector<Block> blocks;
  blocks.push_back({"proj weight", net.proj_weight_offset(), int64_t{spec.latent_dim} * spec.proj_outputs()});
  blocks.push_back({"proj bias", net.proj_bias_offset(), spec.proj_outputs()});
  static const char* const kBatchNormParts[4] = {"beta", "gamma", "mean", "var"};
  for (int stage = 0; stage < spec.stages(); ++stage) {
    const int channels = spec.stage_channels(stage);
    for (int part = 0; part < 4; ++part) {
      blocks.push_back({"bn" + std::to_string(stage) + " " + kBatchNormParts[part],
                        net.batchnorm_offset(stage) + int64_t{part} * channels, channels});
    }
    const std::string tconv = "tconv" + std::to_string(stage + 1);
    blocks.push_back({tconv + " weight", net.tconv_weight_offset(stage), tconv_weight_floats(spec, stage)});
    blocks.push_back({tconv + " bias", net.tconv_bias_offset(stage), spec.stage_channels(stage + 1)});
  }
  return blocks;
}

// splitmix64 (Steele, Lea, Flood 2014): a counter-based generator, identical on every platform.
uint64_t splitmix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1) with 53 random bits.
double uniform01(uint64_t* state) { return static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53; }

// One standard normal value by the Box-Muller transform (its cosine half only, so each value uses
// exactly two draws and the stream does not depend on how values pair up).
double normal01(uint64_t* state) {
  const double u1 = 1.0 - uniform01(state);  // (0, 1]: log stays finite
  const double u2 = uniform01(state);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

void fill_normal(float* dst, int64_t n, double stddev, uint64_t* state) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(stddev * normal01(state));
}

void fill_uniform(float* dst, int64_t n, double low, double high, uint64_t* state) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(low + (high - low) * uniform01(state));
}

}  // namespace

std::string describe_spec(const ModelSpec& spec) {
  const std::string k = std::to_string(spec.kernel_size);
  return "nz " + std::to_string(spec.latent_dim) + ", ngf " + std::to_string(spec.base_channels) + ", nc " +
         std::to_string(spec.image_channels) + ", " + k + "x" + k + " kernels, " +
         (spec.has_bias ? "with biases" : "no biases") + ", " + std::to_string(spec.image_size) + "x" +
         std::to_string(spec.image_size) + " images";
}

int64_t Network::float_count(const ModelSpec& spec) { return WeightOffsets(spec).total; }

Network::Network(const ModelSpec& spec) : Network(spec, std::vector<float>()) {}

Network::Network(const ModelSpec& spec, std::vector<float> floats) : spec_(spec), floats_(std::move(floats)) {
  const std::string problem = model_spec_problem(spec);
  if (!problem.empty()) throw std::invalid_argument("a network's " + problem);
  const int64_t expected = float_count(spec);
  if (floats_.empty()) floats_.assign(static_cast<size_t>(expected), 0.0f);
  if (static_cast<int64_t>(floats_.size()) != expected) {
    throw std::invalid_argument("a network of " + describe_spec(spec) + " has " + std::to_string(expected) +
                                " floats, got " + std::to_string(floats_.size()));
  }
}

int64_t Network::proj_bias_offset() const { return WeightOffsets(spec_).proj_bias; }

int64_t Network::batchnorm_offset(int stage) const {
  check_stage(spec_, stage);
  return WeightOffsets(spec_).bn[stage];
}

int64_t Network::tconv_weight_offset(int stage) const {
  check_stage(spec_, stage);
  return WeightOffsets(spec_).tconv_weight[stage];
}

int64_t Network::tconv_bias_offset(int stage) const {
  check_stage(spec_, stage);
  return WeightOffsets(spec_).tconv_bias[stage];
}

const float* Network::proj_weight() const { return floats_.data() + proj_weight_offset(); }
const float* Network::proj_bias() const { return floats_.data() + proj_bias_offset(); }

BatchNormView Network::batchnorm(int stage) const {
  check_stage(spec_, stage);
  const int channels = spec_.stage_channels(stage);
  const float* base = floats_.data() + batchnorm_offset(stage);
  return {base, base + channels, base + 2 * channels, base + 3 * channels, channels};
}

TConvView Network::tconv(int stage) const {
  check_stage(spec_, stage);
  return {floats_.data() + tconv_weight_offset(stage), floats_.data() + tconv_bias_offset(stage),
          spec_.stage_channels(stage), spec_.stage_channels(stage + 1), ModelSpec::stage_size(stage),
          spec_.kernel_size};
}

namespace {

// A regular file is told apart by its content or its name; a pipe is read as a network.bin.
bool is_safetensors_file(const InputFile& file) {
  if (!file.regular()) return false;
  const std::string& path = file.path();
  const bool named = path.size() >= 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0;
  std::string start(static_cast<size_t>(std::min<int64_t>(9, file.bytes())), '\0');
  file.read_at(0, static_cast<int64_t>(start.size()), start.data());
  return named || looks_like_safetensors(start);
}

// A PyTorch file (torch.save: a zip archive, or a pickle in the old format), which facegen does not read
// but tools/export_model.py turns into safetensors.
bool is_pytorch_file(const InputFile& file) {
  if (!file.regular() || file.bytes() < 4) return false;
  char start[4];
  file.read_at(0, 4, start);
  return std::memcmp(start, "PK\x03\x04", 4) == 0 || (start[0] == '\x80' && start[1] >= 2 && start[1] <= 5);
}

Network load_network_bin(const InputFile& file) {
  const std::string& path = file.path();
  if (file.directory()) throw UserError("model file " + path + " is a directory, not a network.bin");
  if (is_pytorch_file(file)) {
    throw UserError("model file " + path + " is a PyTorch file (torch.save), which facegen does not read: make a "
                    "safetensors file of it with `tools/export_model.py " + path + " OUT.safetensors` "
                    "(installed as facegen-export-model) and give that to --model");
  }
  if (file.regular() && file.bytes() != kNetworkBytes) {
    throw UserError("model file " + path + " has " + with_commas(file.bytes()) + " bytes, expected " +
                    with_commas(kNetworkBytes) + " bytes (" + with_commas(kNetworkFloats) +
                    " little-endian float32 values)");
  }

  // Read one byte past the expected size so that a stream (a pipe) that is too long is noticed too; a
  // regular file gives no more than its size at the open.
  std::vector<float> floats(static_cast<size_t>(kNetworkFloats));
  char* dst = reinterpret_cast<char*>(floats.data());
  int64_t got = 0;
  char extra = 0;
  for (;;) {
    char* where = got < kNetworkBytes ? dst + got : &extra;
    const int64_t want = got < kNetworkBytes ? kNetworkBytes - got : 1;
    const int64_t n = file.read_some(got, want, where);
    if (n == 0) break;
    got += n;
    if (got > kNetworkBytes) break;
  }
  if (got != kNetworkBytes) {
    // Reading stops one byte past the expected size: a longer file has "more than" that size.
    throw UserError("model file " + path + " has " + (got > kNetworkBytes ? "more than " : "") +
                    with_commas(std::min(got, kNetworkBytes)) + " bytes, expected " + with_commas(kNetworkBytes) + " bytes (" +
                    with_commas(kNetworkFloats) + " little-endian float32 values)");
  }

  Network net(kShpcSpec, std::move(floats));
  validate_network(net, path);
  return net;
}

}  // namespace

ModelSpec read_model_spec(const InputFile& file) {
  return file.blame_change([&] { return is_safetensors_file(file) ? read_safetensors_spec(file) : kShpcSpec; });
}

Network load_network(const InputFile& file) {
  Network net = file.blame_change(
      [&] { return is_safetensors_file(file) ? load_safetensors_network(file) : load_network_bin(file); });
  file.check_unchanged();  // after the last read: these are the bytes the file had at its open
  return net;
}

ModelSpec read_model_spec(const std::string& path) { return read_model_spec(InputFile(path, InputKind::Model)); }

Network load_network(const std::string& path) { return load_network(InputFile(path, InputKind::Model)); }

void validate_network(const Network& net, const std::string& source) {
  const std::vector<float>& f = net.floats();
  if (static_cast<int64_t>(f.size()) != Network::float_count(net.spec())) {
    throw std::logic_error("validate_network: network has " + std::to_string(f.size()) + " floats");
  }
  for (const Block& block : layout_blocks(net)) {
    const float* values = f.data() + block.offset;
    const int64_t i = first_non_finite(values, block.size);
    if (i < block.size) {
      throw UserError("model file " + source + " is corrupt: " + block.name + "[" + std::to_string(i) +
                      "] (float " + with_commas(block.offset + i) + " of the file) is " +
                      (std::isnan(values[i]) ? "NaN" : values[i] > 0 ? "+Inf" : "-Inf"));
    }
  }
  for (int stage = 0; stage < net.spec().stages(); ++stage) {
    const BatchNormView bn = net.batchnorm(stage);
    for (int c = 0; c < bn.channels; ++c) {
      if (!(bn.var[c] + kBatchNormEps > 0.0f)) {
        char value[64];
        std::snprintf(value, sizeof value, "%.9g", static_cast<double>(bn.var[c]));
        throw UserError("model file " + source + " is corrupt: bn" + std::to_string(stage) + " var[" +
                        std::to_string(c) + "] is " + value +
                        ", but a batch-norm variance plus 1e-5 must be positive");
      }
    }
  }
}

void save_network(const Network& net, const std::string& path) {
  const std::vector<float>& f = net.floats();
  if (net.spec() != kShpcSpec) {
    throw std::invalid_argument("a network.bin holds the SHPC network only, not one of " + describe_spec(net.spec()));
  }
  AtomicFile file(path);
  file.write(f.data(), f.size() * sizeof(float));
  file.commit();
}

Network make_random_network(const ModelSpec& spec, uint64_t seed) {
  // Scales, for z ~ N(0, 1): proj gives each output variance nz * (1 / nz) = 1. Batch norm keeps
  // that near 1 and ReLU halves the second moment. A stride-2 k x k transposed convolution sums on
  // average k^2 / 4 taps per output pixel and input channel (6.25 for k = 5), so weights of
  // variance 2 / (k^2 / 4 * c_in) give outputs of variance about 1 (He's rule). The last one is
  // scaled by 0.6 so that the pre-tanh values have a standard deviation near 0.6: images spread
  // over (-1, 1), not saturated. A model without biases keeps them zero and draws none.
  Network net(spec);
  float* f = net.mutable_floats().data();
  uint64_t state = seed;
  const double taps_per_output = spec.kernel_size * spec.kernel_size / 4.0;

  fill_normal(f + net.proj_weight_offset(), int64_t{spec.latent_dim} * spec.proj_outputs(),
              1.0 / std::sqrt(double(spec.latent_dim)), &state);
  if (spec.has_bias) fill_normal(f + net.proj_bias_offset(), spec.proj_outputs(), 0.01, &state);
  for (int stage = 0; stage < spec.stages(); ++stage) {
    const int channels = spec.stage_channels(stage);
    float* bn = f + net.batchnorm_offset(stage);
    fill_normal(bn, channels, 0.1, &state);                   // beta
    fill_uniform(bn + channels, channels, 0.8, 1.2, &state);  // gamma
    fill_normal(bn + 2 * channels, channels, 0.1, &state);    // mean
    fill_uniform(bn + 3 * channels, channels, 0.8, 1.2, &state);  // var

    const double gain = stage == spec.stages() - 1 ? 0.6 : 1.0;
    fill_normal(f + net.tconv_weight_offset(stage), tconv_weight_floats(spec, stage),
                gain * std::sqrt(2.0 / (taps_per_output * channels)), &state);
    if (spec.has_bias) fill_normal(f + net.tconv_bias_offset(stage), spec.stage_channels(stage + 1), 0.01, &state);
  }
  return net;
}

}  // namespace facegen
