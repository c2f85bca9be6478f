// answer.cpp: see answer.hpp.
#include "serve/answer.hpp"

#include "formats/memory_output.hpp"

namespace facegen::serve {
namespace {

// The batch tool's output options for this request: its defaults (mosaic_tiles 128, shards of
// 10,000 samples), the service's PNG level, the request's grid, the run's facts.
OutputOptions options_for(const GenerateSpec& spec, const ServiceFacts& facts) {
  OutputOptions options;
  options.image_channels = facts.spec.image_channels;
  options.grid_columns = spec.columns;
  options.grid_padding = spec.padding;
  options.png_level = facts.png_level;
  options.facts.model = facts.model;
  options.facts.model_xxh3 = facts.model_xxh3;
  options.facts.precision = facts.precision;
  // --seeds: drawn (random) with each image's own seed; latents: read from a file.
  options.facts.random = !spec.seeds.empty();
  options.facts.random_seed = 1;
  options.facts.truncation = spec.truncation;
  if (!spec.seeds.empty()) {
    const std::vector<uint64_t> seeds = spec.seeds;
    options.facts.image_seed = [seeds](int64_t index) { return seeds.at(static_cast<size_t>(index)); };
    options.facts.named_by_seed = true;  // as the batch tool's --seeds: tar keys seed0042 (request.cpp refuses repeats)
  }
  return options;
}

void check_mosaic_size(const GenerateSpec& spec) {
  const MosaicGrid grid = mosaic_grid(spec.count, spec.columns, spec.padding);
  const int64_t bytes = grid.width() * grid.height() * 3;
  if (bytes > kMaxMosaicPixelBytes) {
    throw RequestError(400, "the mosaic would be " + std::to_string(grid.width()) + " x " + std::to_string(grid.height()) +
                                " pixels, more than the " + std::to_string(kMaxMosaicPixelBytes >> 20) +
                                " MiB of pixels an answer may take; ask for fewer columns or less padding");
  }
}

}  // namespace

std::string encode_answer(const GenerateSpec& spec, const float* images, const ServiceFacts& facts) {
  if (spec.format.format == OutputFormat::MosaicPng) check_mosaic_size(spec);
  const OutputLayout layout(spec.format.format, "answer", spec.count, options_for(spec, facts));
  std::vector<std::string> files = encode_in_memory(layout, images);
  return std::move(files.at(0));  // one file: at most 4,096 images, one shard, one mosaic
}

}  // namespace facegen::serve
