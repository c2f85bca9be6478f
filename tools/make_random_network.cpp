// make_random_network: writes a network.bin of seeded random weights (make_random_network in
// generator/network.hpp), the model the program runs until a trained one is available.
//
//   make-random-network --seed 1 --output build/random-network.bin
//
// The same seed gives the same 20,549,132 bytes on every machine. Exit status: 0 written, 1 a
// problem with the output path, 2 bad command-line arguments.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>

#include <cxxopts.hpp>

#include "common/errors.hpp"
#include "generator/network.hpp"
#include "tools/tool_options.hpp"

int main(int argc, char** argv) {
  cxxopts::Options options("make-random-network",
                           "Write a facegen network.bin of seeded random weights (" +
                               std::to_string(facegen::kNetworkBytes) + " bytes).");
  options.add_options()
      ("seed", "random seed; the same seed gives the same bytes", cxxopts::value<uint64_t>()->default_value("1"))
      ("output", "path of the network.bin to write (written atomically)", cxxopts::value<std::string>())
      ("h,help", "print this help");

  uint64_t seed = 0;
  std::string output;
  try {
    const std::optional<cxxopts::ParseResult> parsed = facegen::parse_tool_options(options, argc, argv);
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
    facegen::save_network(facegen::make_random_network(seed), output);
  } catch (const facegen::UserError& e) {
    std::fprintf(stderr, "make-random-network: %s\n", e.what());
    return 1;
  }
  std::printf("wrote %s: random network, seed %llu, %lld float32 values (%lld bytes)\n", output.c_str(),
              static_cast<unsigned long long>(seed), static_cast<long long>(facegen::kNetworkFloats),
              static_cast<long long>(facegen::kNetworkBytes));
  return 0;
}
