// answer.cpp: see answer.hpp.
#include "serve/answer.hpp"

#include <memory>

#include "formats/memory_output.hpp"

namespace facegen::serve {
namespace {

// The batch tool's output options for this request: its defaults (mosaic_tiles 128, shards of
// 10,000 samples), the service's PNG level, the request's grid, the run's facts.
OutputOptions options_for(const GenerateSpec& spec, const ServiceFacts& facts) {
  OutputOptions options;
  options.image_channels = facts.spec.image_channels;
  options.image_size = facts.spec.image_size;
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

// The one file of the request's output (at most 4,096 images: one shard, one mosaic).
std::string encode_file(const GenerateSpec& spec, const ImageRun& images, const ServiceFacts& facts) {
  const OutputLayout layout(spec.format.format, "answer", spec.count, options_for(spec, facts));
  std::vector<std::string> files = encode_in_memory(layout, images);
  return std::move(files.at(0));
}

// The body as the format's header and each piece's bytes as they lie (held by the answer).
void gather(const MadeImages& made, std::string header, size_t image_bytes, HttpResponse& response) {
  response.body = std::move(header);
  for (const ImagePiece& piece : made.pieces) {
    response.slices.push_back({static_cast<const char*>(piece.images), static_cast<size_t>(piece.count) * image_bytes});
    response.holds.push_back(piece.hold);
  }
}

}  // namespace

ImageProduct answer_product(const GenerateSpec& spec, const ServiceFacts& facts) {
  if (spec.format.format == OutputFormat::Npy) return ImageProduct::Floats;
  if (spec.format.format == OutputFormat::Png && facts.png_level == 0) return ImageProduct::Png;
  return ImageProduct::Pixels;
}

bool answer_is_gathered(const GenerateSpec& spec, const ServiceFacts& facts) {
  const OutputFormat format = spec.format.format;
  return format == OutputFormat::Npy || format == OutputFormat::NpyU8 || (format == OutputFormat::Png && facts.png_level == 0);
}

void check_answer(const GenerateSpec& spec, int image_size) {
  if (spec.format.format != OutputFormat::MosaicPng) return;
  const MosaicGrid grid = mosaic_grid(spec.count, spec.columns, spec.padding, image_size);
  const int64_t bytes = grid.width() * grid.height() * 3;
  if (bytes > kMaxMosaicPixelBytes) {
    throw RequestError(400, "the mosaic would be " + std::to_string(grid.width()) + " x " + std::to_string(grid.height()) +
                                " pixels, more than the " + std::to_string(kMaxMosaicPixelBytes >> 20) +
                                " MiB of pixels an answer may take; ask for fewer columns or less padding");
  }
}

void answer_made(const GenerateSpec& spec, const MadeImages& made, const ServiceFacts& facts, HttpResponse& response) {
  response.set(200, spec.format.content_type, "");
  const int channels = facts.spec.image_channels, size = facts.spec.image_size;
  const size_t rgb_bytes = static_cast<size_t>(rgb8_image_bytes(size));
  switch (spec.format.format) {
    case OutputFormat::Npy:
      return gather(made, npy_header(spec.count, channels, size),
                    static_cast<size_t>(image_bytes(ImageEncoding::Float32, channels, size)), response);
    case OutputFormat::NpyU8:
      return gather(made, npy_u8_header(spec.count, size), rgb_bytes, response);
    case OutputFormat::Png:
      if (made.product == ImageProduct::Png) {  // one image: its PNG as the batcher left it
        const ImagePiece& piece = made.pieces.at(0);
        response.slices.push_back({piece.png, piece.png_bytes[0]});
        response.holds.push_back(piece.hold);
        return;
      }
      break;
    default:
      break;
  }
  check_answer(spec, size);
  std::unique_ptr<unsigned char[]> pixels(new unsigned char[static_cast<size_t>(spec.count) * rgb_bytes]);  // (count, S, S, 3)
  made.copy_to(pixels.get(), rgb_bytes);
  response.body = encode_file(spec, ImageRun::rgb8(pixels.get(), channels, size), facts);
}

std::string encode_answer(const GenerateSpec& spec, const float* images, const ServiceFacts& facts) {
  check_answer(spec, facts.spec.image_size);
  return encode_file(spec, ImageRun::floats(images, facts.spec.image_channels, facts.spec.image_size), facts);
}

}  // namespace facegen::serve
