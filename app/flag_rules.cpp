// flag_rules.cpp: flags that the run would ignore, or that contradict another, refused (see
// flag_rules.hpp).
#include "app/flag_rules.hpp"

#include <algorithm>
#include <string>

#include "common/command_line.hpp"
#include "common/errors.hpp"

namespace facegen {
namespace {

// A flag the run takes only in some contexts: `used` says whether this run is one, `why_not` ends
// the sentence that refuses it.
struct FlagUse {
  const char* flag;
  bool used;
  const char* why_not;
};

bool has_any(const std::vector<OutputFormat>& formats, std::initializer_list<OutputFormat> wanted) {
  return std::any_of(formats.begin(), formats.end(),
                     [&](OutputFormat f) { return std::find(wanted.begin(), wanted.end(), f) != wanted.end(); });
}

}  // namespace

void refuse_unused_flags(const cxxopts::ParseResult& args, const std::vector<OutputFormat>& formats, bool parallel_job) {
  const std::string device = args["device"].as<std::string>();
  const bool gpu_possible = device == "cuda" || device == "auto";
  const bool drawn = args.count("random") || args.count("interpolate");
  const bool quiet = args.count("quiet") > 0;
  const char* not_parallel = "applies to the ranks of a parallel job (under mpirun or srun, or with --mpi), and this "
                             "run is one process";
  const FlagUse uses[] = {
      {"seed", drawn || args.count("seeds") > 0,
       "is the seed of --random and --interpolate, and the latents of --input are read from its file"},
      {"gpu", gpu_possible, "picks the CUDA device of --device cuda or auto, and this run's --device names none"},
      {"batch", gpu_possible, "sets the images of a GPU batch, and this run's --device uses no GPU (--threads sets the "
                              "CPU's share of work)"},
      {"model", device != "synthetic", "names the generator, and --device synthetic draws test images without one"},
      {"mosaic-tiles", has_any(formats, {OutputFormat::Bmp, OutputFormat::MosaicPng}),
       "splits the mosaic formats (bmp, mosaic-png), and --formats asks for none of them"},
      {"progress-every", !quiet, "paces the progress lines, and --quiet shows none"},
      {"verbose", parallel_job, not_parallel},
      {"all-ranks", parallel_job, not_parallel},
      {"min-images-per-rank", parallel_job, not_parallel},
      {"images-per-round", parallel_job, not_parallel},
  };
  for (const FlagUse& use : uses) {
    if (args.count(use.flag) && !use.used) throw UserError(flag_text(use.flag) + " " + use.why_not);
  }
  // Two flags that say opposite things.
  if (args.count("verbose") && quiet) {
    throw UserError("--verbose asks every rank to report itself, and --quiet for nothing but errors; give one");
  }
  if (args.count("images-per-round") && args.count("chunk")) {
    throw UserError("--images-per-round is --chunk under another name; give one");
  }
}

void refuse_flags_beside_finish_commit(const cxxopts::ParseResult& args) {
  for (const cxxopts::KeyValue& given : args.arguments()) {
    if (given.key() == "finish-commit") continue;
    throw UserError("--finish-commit only finishes a killed run's commit and runs nothing, so " + flag_text(given.key()) +
                    " has nothing to act on; give it alone");
  }
}

}  // namespace facegen
