// make_latents: writes a latent file of N standard-normal vectors (N, 100), the program's input.
//
//   make-latents --count 10 --seed 1 --output inputs/input1.txt
//
// Format: "N\n", then one line per image of 100 values as "%.6f", separated by single spaces. Each
// value is a function of (seed, image, value index) alone, so a file of 10 images is the first 10
// lines of one of 1000 with the same seed. Exit status: 0 written, 1 output problem, 2 bad arguments.
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include <cxxopts.hpp>

#include "latents/latent_source.hpp"
#include "tools/tool_options.hpp"

namespace {

constexpr int kLatentDim = 100;

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("make-latents", "Write a facegen latent file of N standard-normal vectors of 100.");
  options.add_options()
      ("count", "number of latent vectors N (> 0)", cxxopts::value<int64_t>())
      ("seed", "random seed; the same seed gives the same vectors for any count",
       cxxopts::value<uint64_t>()->default_value("1"))
      ("output", "path of the text file to write", cxxopts::value<std::string>())
      ("h,help", "print this help");

  int64_t count = 0;
  uint64_t seed = 0;
  std::string output;
  try {
    const std::optional<cxxopts::ParseResult> parsed = facegen::parse_tool_options(options, argc, argv);
    if (!parsed) return 0;
    const cxxopts::ParseResult& args = *parsed;
    if (!args.count("count") || !args.count("output")) {
      throw cxxopts::exceptions::exception("--count N and --output PATH are required");
    }
    count = args["count"].as<int64_t>();
    seed = args["seed"].as<uint64_t>();
    output = args["output"].as<std::string>();
    if (count <= 0) throw cxxopts::exceptions::exception("--count must be positive");
  } catch (const cxxopts::exceptions::exception& e) {
    std::fprintf(stderr, "make-latents: %s (see --help)\n", e.what());
    return 2;
  }

  std::FILE* file = std::fopen(output.c_str(), "w");
  if (file == nullptr) {
    std::fprintf(stderr, "make-latents: cannot create %s: %s\n", output.c_str(), std::strerror(errno));
    return 1;
  }
  bool ok = std::fprintf(file, "%lld\n", static_cast<long long>(count)) > 0;
  for (int64_t image = 0; image < count && ok; ++image) {
    for (int v = 0; v < kLatentDim && ok; ++v) {
      const double z = facegen::random_latent_value(seed, static_cast<uint64_t>(image), static_cast<uint64_t>(v));
      ok = std::fprintf(file, v + 1 < kLatentDim ? "%.6f " : "%.6f\n", z) > 0;
    }
  }
  if (std::fclose(file) != 0) ok = false;
  if (!ok) {
    std::fprintf(stderr, "make-latents: writing %s failed: %s\n", output.c_str(), std::strerror(errno));
    std::remove(output.c_str());
    return 1;
  }
  std::printf("wrote %s: %lld latent vectors of %d, seed %llu\n", output.c_str(), static_cast<long long>(count),
              kLatentDim, static_cast<unsigned long long>(seed));
  return 0;
}
