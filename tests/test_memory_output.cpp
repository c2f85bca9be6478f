// test_memory_output.cpp: each format made in memory (formats/memory_output.hpp) holds the same bytes
// as the file the batch tool's sink writes for the same images: npy, npy-u8, tar (of seeds and of
// latents), png and mosaic-png with a grid.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/image_sink.hpp"
#include "formats/memory_output.hpp"
#include "tests/test_support.hpp"

using namespace facegen;
using namespace facegen_test;

namespace {

std::vector<float> some_images(int64_t count) {  // (count, 64, 64, 3) in (-1, 1)
  std::vector<float> images(static_cast<size_t>(count * 4096 * 3));
  for (size_t k = 0; k < images.size(); ++k) images[k] = static_cast<float>(std::sin(0.37 * static_cast<double>(k)));
  return images;
}

// The bytes of file `name` (in the temporary folder) that the sink of `format` writes for the images.
std::string written(OutputFormat format, const std::vector<float>& images, int64_t count, const SinkOptions& options,
                    const std::string& name) {
  TempDir dir;
  auto sink = make_sink(format, dir.path + "/r", count, options);
  sink->append(images.data(), 0, count);
  sink->commit();
  return read_file(dir.path + "/" + name);
}

std::string in_memory(OutputFormat format, const std::vector<float>& images, int64_t count, const SinkOptions& options,
                      size_t file = 0) {
  const OutputLayout layout(format, "r", count, output_options(options));
  return encode_in_memory(layout, images.data(), 2).at(file);
}

}  // namespace

TEST_CASE("memory output: every format's bytes equal the sink's file") {
  const int64_t n = 7;
  const std::vector<float> images = some_images(n);
  SinkOptions options;
  options.threads = 2;
  options.facts.model = "m.bin";
  options.facts.precision = "fp32";
  CHECK(in_memory(OutputFormat::Npy, images, n, options) == written(OutputFormat::Npy, images, n, options, "r.npy"));
  CHECK(in_memory(OutputFormat::NpyU8, images, n, options) == written(OutputFormat::NpyU8, images, n, options, "r.u8.npy"));
  CHECK(in_memory(OutputFormat::Tar, images, n, options) == written(OutputFormat::Tar, images, n, options, "r-000000.tar"));
  CHECK(in_memory(OutputFormat::Png, images, n, options, 3) == written(OutputFormat::Png, images, n, options, "r/000003.png"));
  options.grid_columns = 3;
  options.grid_padding = 2;
  CHECK(in_memory(OutputFormat::MosaicPng, images, n, options) == written(OutputFormat::MosaicPng, images, n, options, "r.png"));
  options.facts.image_seed = [](int64_t index) { return static_cast<uint64_t>(100 + index); };
  options.facts.random = true;
  CHECK(in_memory(OutputFormat::Tar, images, n, options) == written(OutputFormat::Tar, images, n, options, "r-000000.tar"));
}

TEST_CASE("memory output: a png folder gives one PNG per image, in order") {
  const std::vector<float> images = some_images(3);
  const OutputLayout layout(OutputFormat::Png, "r", 3, OutputOptions{});
  const std::vector<std::string> pngs = encode_in_memory(layout, images.data());
  REQUIRE(pngs.size() == 3);
  for (const std::string& png : pngs) CHECK(png.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
  CHECK(pngs[0] != pngs[1]);
}
