// test_image_run.cpp: runs of 8-bit RGB images (formats/image_run.hpp) against the float32 runs they
// come from: which runs are made 8-bit, every 8-bit format's bytes the same from either, and the
// host's generate_checked (scan flags and pixels) against scan_image and image_to_rgb8 image by image.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "formats/image_run.hpp"
#include "engine/image_sink.hpp"
#include "formats/output_format.hpp"
#include "generator/backend.hpp"
#include "generator/finite_check.hpp"
#include "tests/test_support.hpp"

using namespace facegen;
using namespace facegen_test;

namespace {

// (n, size, size, nc) seeded values, some beyond (-1, 1) and some on the bytes' edges (k / 127.5 - 1).
std::vector<float> seeded_images(int64_t n, int nc, int size, uint64_t seed) {
  std::vector<float> images(static_cast<size_t>(n) * size * size * nc);
  for (size_t i = 0; i < images.size(); ++i) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    const float u = static_cast<float>(seed >> 40) * 0x1.0p-24f;
    images[i] = i % 7 == 0 ? static_cast<float>(seed >> 56) / 127.5f - 1.0f : -1.05f + 2.1f * u;
  }
  return images;
}

// image_to_rgb8 of every image: (n, size, size, 3).
std::vector<unsigned char> rgb8_of(const std::vector<float>& images, int nc, int size) {
  const int64_t values = int64_t{size} * size * nc, n = static_cast<int64_t>(images.size()) / values;
  std::vector<unsigned char> rgb(static_cast<size_t>(n * rgb8_image_bytes(size)), 0xA5);
  for (int64_t i = 0; i < n; ++i) image_to_rgb8(images.data() + i * values, nc, size, rgb.data() + i * rgb8_image_bytes(size));
  return rgb;
}

// Every file `format` puts in place for the run, written in runs of `chunk` images on 3 threads.
std::map<std::string, std::string> write_format(OutputFormat format, const ImageRun& images, int64_t n, int64_t chunk,
                                                const SinkOptions& options) {
  TempDir dir;
  auto sink = make_sink(format, dir.file("r"), n, options);
  for (int64_t first = 0; first < n; first += chunk) sink->append(images.skip(first), first, std::min(chunk, n - first));
  sink->commit();
  sink.reset();  // a mosaic PNG's pixel files go with the sink
  std::map<std::string, std::string> files;
  for (const std::string& name : dir.names()) {
    if (format == OutputFormat::Png) {
      for (const auto& entry : std::filesystem::directory_iterator(dir.file(name)))
        files[name + "/" + entry.path().filename().string()] = read_file(entry.path());
    } else {
      files[name] = read_file(dir.file(name));
    }
  }
  return files;
}

}  // namespace

TEST_CASE("image runs: 8-bit only where every format is 8-bit") {
  using F = OutputFormat;
  CHECK(image_encoding_for({F::Bmp}) == ImageEncoding::Rgb8);
  CHECK(image_encoding_for({F::Bmp, F::Png, F::MosaicPng, F::Tar, F::NpyU8}) == ImageEncoding::Rgb8);
  CHECK(image_encoding_for({F::Bmp, F::Text}) == ImageEncoding::Float32);
  CHECK(image_encoding_for({F::NpyU8, F::Npy}) == ImageEncoding::Float32);
  CHECK(image_encoding_for({F::Text}) == ImageEncoding::Float32);
  CHECK(image_encoding_for({}) == ImageEncoding::Float32);
  CHECK_THROWS_AS(ImageRun::rgb8(nullptr, 3, 64).values(), std::logic_error);  // txt and npy never get pixels
}

TEST_CASE("image runs: every 8-bit format writes the same bytes from 8-bit pixels as from the floats") {
  for (const auto& [nc, size] : {std::pair{3, 64}, std::pair{1, 64}, std::pair{3, 32}, std::pair{1, 128}}) {
    const int64_t n = 23;
    const std::vector<float> images = seeded_images(n, nc, size, 40 + nc + size);
    const std::vector<unsigned char> rgb = rgb8_of(images, nc, size);
    SinkOptions options;
    options.threads = 3;
    options.image_channels = nc;
    options.image_size = size;
    options.shard_images = 5;
    options.mosaic_tiles = 4;  // numbered mosaics, a part-filled last one
    options.grid_padding = 2;
    options.grid_columns = 3;
    options.png_level = 1;
    options.facts.precision = "fp32";
    for (OutputFormat format : {OutputFormat::Bmp, OutputFormat::Png, OutputFormat::MosaicPng, OutputFormat::Tar,
                                OutputFormat::NpyU8}) {
      for (int64_t chunk : {int64_t{1}, int64_t{7}, n}) {
        CAPTURE(nc);
        CAPTURE(size);
        const std::string name = format_name(format);
        CAPTURE(name);
        CAPTURE(chunk);
        const auto from_floats = write_format(format, ImageRun::floats(images.data(), nc, size), n, chunk, options);
        const auto from_pixels = write_format(format, ImageRun::rgb8(rgb.data(), nc, size), n, chunk, options);
        REQUIRE(!from_floats.empty());
        CHECK(from_pixels.size() == from_floats.size());
        for (const auto& [file, bytes] : from_floats) {
          CAPTURE(file);
          REQUIRE(from_pixels.count(file) == 1);
          CHECK(from_pixels.at(file) == bytes);
        }
      }
    }
  }
}

namespace {

// Images chosen by each latent's first value: 0 ordinary, 1 a NaN at a value that depends on the
// image, 2 an Inf, 3 every value exactly +-1, 4 every value +-1 but one.
class ScriptedBackend : public Backend {
 public:
  ScriptedBackend(int nz, int nc, int size) : nz_(nz), nc_(nc), size_(size) {}
  std::string describe() const override { return "scripted"; }
  void generate(const float* latents, int64_t n, float* images) override {
    const int64_t values = int64_t{size_} * size_ * nc_;
    for (int64_t i = 0; i < n; ++i) {
      float* image = images + i * values;
      const float* z = latents + i * nz_;
      for (int64_t v = 0; v < values; ++v) image[v] = std::sin(z[1] + 0.001f * static_cast<float>(v));
      const int kind = static_cast<int>(z[0]);
      const int64_t at = static_cast<int64_t>(z[1] * 1000.0f) % values;
      if (kind == 1) image[at] = std::numeric_limits<float>::quiet_NaN();
      if (kind == 2) image[at] = -std::numeric_limits<float>::infinity();
      if (kind >= 3) {
        for (int64_t v = 0; v < values; ++v) image[v] = v % 2 ? 1.0f : -1.0f;
      }
      if (kind == 4) image[at] = 0.5f;
    }
  }

 private:
  int nz_, nc_, size_;
};

}  // namespace

TEST_CASE("generate_checked on the host: scan_image's flags and image_to_rgb8's pixels, piece after piece") {
  for (const auto& [nc, size] : {std::pair{3, 64}, std::pair{1, 64}, std::pair{3, 32}, std::pair{1, 128}}) {
    const int nz = 5;
    const int64_t n = 601;  // three pieces, the last part-filled
    const int64_t values = int64_t{size} * size * nc;
    std::vector<float> latents(static_cast<size_t>(n * nz));
    for (int64_t i = 0; i < n; ++i) {
      latents[i * nz] = static_cast<float>((i * 7) % 5);
      latents[i * nz + 1] = 0.37f * static_cast<float>(i);
    }
    ScriptedBackend backend(nz, nc, size);
    std::vector<float> floats(static_cast<size_t>(n * values));
    backend.generate(latents.data(), n, floats.data());
    const std::vector<unsigned char> expected_rgb = rgb8_of(floats, nc, size);

    for (ImageEncoding encoding : {ImageEncoding::Float32, ImageEncoding::Rgb8}) {
      CAPTURE(nc);
      CAPTURE(size);
      CAPTURE(encoding == ImageEncoding::Rgb8);
      const int64_t bytes = n * image_bytes(encoding, nc, size);
      std::vector<unsigned char> images(static_cast<size_t>(bytes) + 64, 0xEE);  // poisoned, 64 bytes past the end
      std::vector<uint8_t> flags(static_cast<size_t>(n) + 8, 0xEE);
      backend.generate_checked(latents.data(), n, {encoding, images.data(), flags.data(), nz, nc, size}, 2);
      for (int64_t i = 0; i < n; ++i) CHECK(flags[i] == scan_image(floats.data() + i * values, values));
      // Image i is of kind (7 i) mod 5: each kind's flags, so the scan above cannot pass by finding nothing.
      CHECK(flags[0] == 0);                // ordinary
      CHECK(flags[3] == kImageNonFinite);  // a NaN
      CHECK(flags[1] == kImageNonFinite);  // an Inf
      CHECK(flags[4] == kImageSaturated);  // every value +-1
      CHECK(flags[2] == 0);                // every value +-1 but one
      if (encoding == ImageEncoding::Rgb8) {
        CHECK(std::memcmp(images.data(), expected_rgb.data(), expected_rgb.size()) == 0);
      } else {
        CHECK(std::memcmp(images.data(), floats.data(), floats.size() * 4) == 0);
      }
      for (int64_t k = bytes; k < bytes + 64; ++k) CHECK(images[k] == 0xEE);
      for (int64_t k = n; k < n + 8; ++k) CHECK(flags[k] == 0xEE);
    }
  }
}
