// test_png_encoder.cpp: the PNG encoder (formats/png_encoder.hpp) against two decoders that share none
// of its code: stb_image, and a chunk walk here whose CRCs, zlib stream and Adler-32 are checked with
// zlib's own crc32, uncompress and adler32. Every level, odd sizes (1 x 1, 65 x 3, rows longer than a
// stored block, bands that do not divide the rows), and the banded mosaic's bytes on 1, 2, 3 and 7
// threads. Pixels are fresh each run, half of them copies of their left neighbour so that deflate
// finds matches; the seed is printed.
#include <doctest/doctest.h>
#include <stb_image.h>
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "formats/png_encoder.hpp"

using namespace facegen;

namespace {

uint64_t fresh_seed() {
  static const uint64_t seed = [] {
    const uint64_t s = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
    MESSAGE("png encoder tests: pixel seed " << s);
    return s;
  }();
  return seed;
}

// (height, width, 3) bytes: random, or a copy of the pixel to the left.
std::vector<unsigned char> some_pixels(int64_t width, int64_t height, uint64_t salt) {
  std::mt19937_64 rng(fresh_seed() ^ (salt * 0x9e3779b97f4a7c15ull));
  std::vector<unsigned char> rgb(static_cast<size_t>(width * height * 3));
  for (size_t p = 0; p < rgb.size(); p += 3) {
    const bool copy = p % static_cast<size_t>(width * 3) != 0 && (rng() & 1);
    for (int c = 0; c < 3; ++c) rgb[p + c] = copy ? rgb[p + c - 3] : static_cast<unsigned char>(rng());
  }
  return rgb;
}

uint32_t be32(const std::string& s, size_t at) {
  const auto* b = reinterpret_cast<const unsigned char*>(s.data()) + at;
  return uint32_t{b[0]} << 24 | uint32_t{b[1]} << 16 | uint32_t{b[2]} << 8 | b[3];
}

// The pixels of filtered rows, each of filter type 0 (none) or 1 (Sub), as the PNG specification
// defines them; any other type fails the check.
std::vector<unsigned char> unfilter(const std::vector<unsigned char>& filtered, int64_t width, int64_t height) {
  const int64_t stride = width * 3;
  std::vector<unsigned char> rgb(static_cast<size_t>(stride * height));
  for (int64_t r = 0; r < height; ++r) {
    const unsigned char type = filtered[static_cast<size_t>(r * (stride + 1))];
    const unsigned char* in = &filtered[static_cast<size_t>(r * (stride + 1) + 1)];
    unsigned char* out = &rgb[static_cast<size_t>(r * stride)];
    REQUIRE_MESSAGE((type == 0 || type == 1), "row " << r << " has filter type " << int(type));
    for (int64_t x = 0; x < stride; ++x) {
      out[x] = static_cast<unsigned char>(in[x] + (type == 1 && x >= 3 ? out[x - 3] : 0));
    }
  }
  return rgb;
}

// Walks the chunks, checks each CRC with zlib's crc32, inflates the joined IDAT data with zlib's
// uncompress, checks the Adler-32 trailer with zlib's adler32, undoes the rows' filters and returns
// the pixels.
std::vector<unsigned char> decode_with_zlib(const std::string& png, int64_t width, int64_t height) {
  REQUIRE(png.size() > 8);
  CHECK(png.compare(0, 8, std::string("\x89PNG\r\n\x1a\n", 8)) == 0);
  std::string stream;
  std::vector<std::string> types;
  size_t at = 8;
  while (at + 12 <= png.size()) {
    const uint32_t length = be32(png, at);
    REQUIRE(at + 12 + length <= png.size());
    const std::string type = png.substr(at + 4, 4);
    const auto* covered = reinterpret_cast<const Bytef*>(png.data() + at + 4);
    CHECK_MESSAGE(be32(png, at + 8 + length) == crc32(0, covered, 4 + length), type);
    if (type == "IHDR") {
      CHECK(be32(png, at + 8) == width);
      CHECK(be32(png, at + 12) == height);
      CHECK(png.compare(at + 16, 5, std::string("\x08\x02\x00\x00\x00", 5)) == 0);
    }
    if (type == "IDAT") stream += png.substr(at + 8, length);
    types.push_back(type);
    at += 12 + length;
  }
  CHECK(at == png.size());
  REQUIRE(types.size() >= 3);
  CHECK(types.front() == "IHDR");
  CHECK(types.back() == "IEND");
  REQUIRE(stream.size() >= 6);
  CHECK((static_cast<unsigned char>(stream[0]) * 256 + static_cast<unsigned char>(stream[1])) % 31 == 0);

  const int64_t stride = width * 3 + 1;
  std::vector<unsigned char> filtered(static_cast<size_t>(stride * height));
  uLongf got = static_cast<uLongf>(filtered.size());
  REQUIRE(uncompress(filtered.data(), &got, reinterpret_cast<const Bytef*>(stream.data()), stream.size()) == Z_OK);
  REQUIRE(got == filtered.size());
  CHECK(be32(stream, stream.size() - 4) == adler32(1, filtered.data(), static_cast<uInt>(filtered.size())));
  return unfilter(filtered, width, height);
}

std::vector<unsigned char> decode_with_stb(const std::string& png, int64_t width, int64_t height) {
  int w = 0, h = 0, c = 0;
  unsigned char* pixels =
      stbi_load_from_memory(reinterpret_cast<const stbi_uc*>(png.data()), static_cast<int>(png.size()), &w, &h, &c, 3);
  REQUIRE_MESSAGE(pixels != nullptr, stbi_failure_reason());
  CHECK((w == width && h == height && c == 3));
  std::vector<unsigned char> rgb(pixels, pixels + w * h * 3);
  stbi_image_free(pixels);
  return rgb;
}

void check_decodes(const std::string& png, const std::vector<unsigned char>& rgb, int64_t width, int64_t height) {
  CHECK(decode_with_zlib(png, width, height) == rgb);
  CHECK(decode_with_stb(png, width, height) == rgb);
}

std::string banded_png(const std::vector<unsigned char>& rgb, int64_t width, int64_t height, int level, int threads,
                       int64_t band_rows) {
  std::string png;
  const int64_t bytes = encode_png_in_bands(
      rgb.data(), width, height, level, threads,
      [&](const void* data, int64_t n) { png.append(static_cast<const char*>(data), static_cast<size_t>(n)); },
      band_rows);
  CHECK(bytes == static_cast<int64_t>(png.size()));
  return png;
}

struct Size {
  int64_t width, height;
};

}  // namespace

TEST_CASE("png encoder: every level and odd sizes decode to the input pixels") {
  // 21,846 pixels: a row of 65,539 filtered bytes, more than one stored block.
  const Size sizes[] = {{1, 1}, {64, 64}, {65, 3}, {3, 65}, {21846, 2}};
  for (int level = 0; level <= kMaxPngLevel; ++level) {
    PngEncoder encoder(level);
    std::string png = "left over from an earlier picture";
    for (const Size& size : sizes) {
      CAPTURE(level);
      CAPTURE(size.width);
      CAPTURE(size.height);
      const auto rgb = some_pixels(size.width, size.height, static_cast<uint64_t>(level * 100 + size.width));
      encoder.encode(rgb.data(), size.width, size.height, png);
      check_decodes(png, rgb, size.width, size.height);
    }
  }
  CHECK_THROWS_AS(PngEncoder(-1), std::invalid_argument);
  CHECK_THROWS_AS(PngEncoder(kMaxPngLevel + 1), std::invalid_argument);
}

TEST_CASE("png encoder: level 0 is stored blocks; level 1 is smaller") {
  const auto rgb = some_pixels(64, 64, 7);
  std::string stored, fast;
  PngEncoder(0).encode(rgb.data(), 64, 64, stored);
  PngEncoder(1).encode(rgb.data(), 64, 64, fast);
  // Signature, IHDR, IDAT (zlib header, one stored block, Adler-32), IEND.
  CHECK(stored.size() == 8 + 25 + 12 + 2 + 5 + 64 * (64 * 3 + 1) + 4 + 12);
  CHECK(fast.size() < stored.size());
}

TEST_CASE("png mosaic in bands: every level decodes, with the same bytes on 1, 2, 3 and 7 threads") {
  struct Case {
    Size size;
    int64_t band_rows;  // 0: png_band_rows
  };
  const Case cases[] = {
      {{1, 1}, 0},      // one band of one row
      {{64, 64}, 0},    // one band
      {{65, 37}, 5},    // 8 bands, the last of 2 rows
      {{21846, 3}, 1},  // bands longer than one stored block
      {{97, 300}, 7},   // 43 bands: more than the 4 per thread held at once
  };
  for (int level = 0; level <= kMaxPngLevel; ++level) {
    for (const Case& c : cases) {
      CAPTURE(level);
      CAPTURE(c.size.width);
      CAPTURE(c.size.height);
      CAPTURE(c.band_rows);
      const auto rgb = some_pixels(c.size.width, c.size.height, static_cast<uint64_t>(level * 1000 + c.size.height));
      const std::string one = banded_png(rgb, c.size.width, c.size.height, level, 1, c.band_rows);
      check_decodes(one, rgb, c.size.width, c.size.height);
      for (int threads : {2, 3, 7}) {
        CAPTURE(threads);
        CHECK(banded_png(rgb, c.size.width, c.size.height, level, threads, c.band_rows) == one);
      }
    }
  }
}

TEST_CASE("png mosaic in bands: the default bands, several of them, decode and do not depend on threads") {
  const int64_t width = 64, height = 3 * png_band_rows(width) + 11;  // 4 bands, the last short
  const auto rgb = some_pixels(width, height, 99);
  for (int level : {0, 1, 6, 12}) {
    CAPTURE(level);
    const std::string one = banded_png(rgb, width, height, level, 1, 0);
    check_decodes(one, rgb, width, height);
    CHECK(banded_png(rgb, width, height, level, 3, 0) == one);
  }
  CHECK(png_band_rows(1) > png_band_rows(8192));
  CHECK(png_band_rows(1 << 20) == 1);
}
