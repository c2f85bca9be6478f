// make_random_network: writes a model file of seeded random weights (make_random_network in
// generator/network.hpp): a network.bin of the SHPC network, the model the program ran until a
// trained one was available, or a safetensors file of any generator of the family (for the tests of
// other shapes: image sizes, widths, grey images).
//
//   make-random-network --seed 1 --output build/random-network.bin
//   make-random-network --seed 1 --output m.safetensors --image-size 32 --nz 64 --ngf 48 --nc 1
//
// The same seed and shape give the same bytes on every machine. A safetensors file is the PyTorch
// tutorial's generator (nz 100, ngf 64, nc 3, 4x4 kernels, no biases, 64x64) but for the flags given.
// Exit status: 0 written, 1 a problem with the output path or the shape, 2 bad command-line arguments.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>

#include <cxxopts.hpp>

#include "commit/atomic_file.hpp"
#include "common/errors.hpp"
#include "generator/network.hpp"
#include "generator/safetensors_model.hpp"
#include "tools/tool_options.hpp"

namespace {

bool ends_with(const std::string& text, const std::string& tail) {
  return text.size() >= tail.size() && text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

// The shape the flags ask for: the SHPC network for a network.bin (which holds nothing else), the
// tutorial's generator with the flags' changes for a safetensors file.
facegen::ModelSpec spec_of(const cxxopts::ParseResult& args, bool safetensors) {
  const char* const shape_flags[] = {"nz", "ngf", "nc", "kernel-size", "bias", "image-size"};
  if (!safetensors) {
    for (const char* flag : shape_flags)
      if (args.count(flag)) throw facegen::UserError(std::string("--") + flag + " needs an --output ending in .safetensors: a network.bin holds the SHPC network only");
    return facegen::kShpcSpec;
  }
  facegen::ModelSpec spec = facegen::kTutorialSpec;
  if (args.count("nz")) spec.latent_dim = args["nz"].as<int>();
  if (args.count("ngf")) spec.base_channels = args["ngf"].as<int>();
  if (args.count("nc")) spec.image_channels = args["nc"].as<int>();
  if (args.count("kernel-size")) spec.kernel_size = args["kernel-size"].as<int>();
  if (args.count("bias")) spec.has_bias = args["bias"].as<bool>();
  if (args.count("image-size")) spec.image_size = args["image-size"].as<int>();
  const std::string problem = facegen::model_spec_problem(spec);
  if (!problem.empty()) throw facegen::UserError("the model's " + problem);
  return spec;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("make-random-network",
                           "Write a facegen model file of seeded random weights: a network.bin (" +
                               std::to_string(facegen::kNetworkBytes) + " bytes) or a .safetensors file of any shape.");
  options.add_options()
      ("seed", "random seed; the same seed gives the same bytes", cxxopts::value<uint64_t>()->default_value("1"))
      ("output", "path of the model file to write (written atomically): a network.bin, or NAME.safetensors",
       cxxopts::value<std::string>())
      ("image-size", "safetensors: pixels a side, 32, 64 or 128", cxxopts::value<int>())
      ("nz", "safetensors: latent values per image", cxxopts::value<int>())
      ("ngf", "safetensors: the last hidden layer's channels", cxxopts::value<int>())
      ("nc", "safetensors: image channels, 1 or 3", cxxopts::value<int>())
      ("kernel-size", "safetensors: 4 (the PyTorch tutorial's) or 5 (the SHPC alignment)", cxxopts::value<int>())
      ("bias", "safetensors: whether the layers add biases (--bias or --bias=false)", cxxopts::value<bool>())
      ("h,help", "print this help");
  uint64_t seed = 0;
  std::string output;
  std::optional<cxxopts::ParseResult> parsed;
  try {
    parsed = facegen::parse_tool_options(options, argc, argv);
    if (!parsed) return 0;
    const cxxopts::ParseResult& args = *parsed;
    if (!args.count("output")) throw cxxopts::exceptions::exception("--output PATH is required");
    seed = args["seed"].as<uint64_t>();
    output = args["output"].as<std::string>();
  } catch (const cxxopts::exceptions::exception& e) {
    std::fprintf(stderr, "make-random-network: %s (see --help)\n", e.what());
    return 2;
  }
  try {
    const bool safetensors = ends_with(output, ".safetensors");
    const facegen::ModelSpec spec = spec_of(*parsed, safetensors);
    const facegen::Network net = facegen::make_random_network(spec, seed);
    if (safetensors) {
      const std::string bytes = facegen::safetensors_bytes(net);
      facegen::AtomicFile file(output);
      file.write(bytes.data(), bytes.size());
      file.commit();
    } else {
      facegen::save_network(net, output);
    }
    std::printf("wrote %s: random network, seed %llu, %s, %lld float32 values\n", output.c_str(),
                static_cast<unsigned long long>(seed), facegen::describe_spec(spec).c_str(),
                static_cast<long long>(net.floats().size()));
  } catch (const facegen::UserError& e) {
    std::fprintf(stderr, "make-random-network: %s\n", e.what());
    return 1;
  }
  return 0;
}
