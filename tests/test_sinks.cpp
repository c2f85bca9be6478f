// test_sinks.cpp: the output files: the text format byte for byte, the fast "%.4f " formatter
// against snprintf on millions of values, the BMP mosaic byte for byte against a header and pixel rows
// built here from the BMP specification, and AtomicFile's all-or-nothing behavior.
//
// Write failures are provoked with RLIMIT_FSIZE (writes past the limit fail with EFBIG), the same
// code path as a full disk.
#include <doctest/doctest.h>

#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "commit/atomic_file.hpp"
#include "common/errors.hpp"
#include "engine/image_sink.hpp"
#include "generator/network.hpp"
#include "tests/test_support.hpp"

using namespace facegen;
using namespace facegen_test;

namespace {

// A small deterministic generator for test data.
struct Lcg {
  uint64_t state;
  uint64_t next() {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state;
  }
  uint32_t bits32() { return static_cast<uint32_t>(next() >> 32); }
  float uniform(float low, float high) {
    return low + (high - low) * static_cast<float>(next() >> 40) * 0x1.0p-24f;
  }
};

float float_from_bits(uint32_t bits) {
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

std::vector<float> random_images(int64_t n, uint64_t seed, float low, float high) {
  Lcg rng{seed};
  std::vector<float> images(static_cast<size_t>(n) * kImageValues);  // (n, 64, 64, 3)
  for (float& v : images) v = rng.uniform(low, high);
  return images;
}

std::string printf_line(const float* image) {
  std::string line;
  char text[64];
  for (int i = 0; i < kImageValues; ++i) {
    std::snprintf(text, sizeof text, "%.4f ", static_cast<double>(image[i]));
    line += text;
  }
  return line + "\n";
}

// Counts values where format_value_text and snprintf("%.4f ") differ; reports the first few.
int64_t formatter_mismatches(const std::vector<float>& values) {
  int64_t bad = 0;
  char fast[64], reference[64];
  for (float v : values) {
    const size_t n = format_value_text(v, fast);
    const int m = std::snprintf(reference, sizeof reference, "%.4f ", static_cast<double>(v));
    if (n != static_cast<size_t>(m) || std::memcmp(fast, reference, n) != 0) {
      if (++bad <= 5) {
        uint32_t bits;
        std::memcpy(&bits, &v, sizeof bits);
        MESSAGE("bits ", bits, ": got '", std::string(fast, n), "', printf '", reference, "'");
      }
    }
  }
  return bad;
}

// BMP of the mosaic, written here from the BMP specification (BITMAPFILEHEADER + BITMAPINFOHEADER,
// BI_RGB, 24 bits, rows bottom-up, BGR, rows padded to 4 bytes; biSizeImage may be 0 for BI_RGB).
std::string expected_bmp(const std::vector<float>& images, int64_t n) {
  int64_t side = 0;
  while (side * side < n) ++side;
  const int64_t width = side * 64;
  const int64_t row_bytes = (width * 3 + 3) / 4 * 4;
  std::string out;
  auto u16 = [&](uint32_t v) {
    out.push_back(static_cast<char>(v & 0xff));
    out.push_back(static_cast<char>((v >> 8) & 0xff));
  };
  auto u32 = [&](uint32_t v) {
    u16(v & 0xffff);
    u16(v >> 16);
  };
  out += "BM";
  u32(static_cast<uint32_t>(54 + row_bytes * width));  // file size
  u16(0);                                               // reserved
  u16(0);
  u32(54);  // offset of the pixels
  u32(40);  // BITMAPINFOHEADER size
  u32(static_cast<uint32_t>(width));
  u32(static_cast<uint32_t>(width));  // positive height: bottom-up rows
  u16(1);                             // planes
  u16(24);                            // bits per pixel
  u32(0);                             // BI_RGB
  u32(0);                             // image size, 0 is allowed for BI_RGB
  u32(0);                             // x pixels per meter
  u32(0);                             // y pixels per meter
  u32(0);                             // colors used
  u32(0);                             // important colors
  for (int64_t r = 0; r < width; ++r) {
    const int64_t y = width - 1 - r;
    for (int64_t x = 0; x < width; ++x) {
      const int64_t tile = y / 64 * side + x / 64;
      unsigned char rgb[3] = {0, 0, 0};
      if (tile < n) {
        const float* pixel = images.data() + tile * kImageValues + (y % 64 * 64 + x % 64) * 3;
        for (int c = 0; c < 3; ++c) rgb[c] = channel_to_byte(pixel[c]);
      }
      out.push_back(static_cast<char>(rgb[2]));
      out.push_back(static_cast<char>(rgb[1]));
      out.push_back(static_cast<char>(rgb[0]));
    }
    out.append(static_cast<size_t>(row_bytes - width * 3), '\0');
  }
  return out;
}

}  // namespace

TEST_CASE("text sink: exact bytes of one image") {
  TempDir dir;
  std::vector<float> image = random_images(1, 1, -1.0f, 1.0f);
  image[0] = 0.5f;
  image[1] = -0.25f;
  image[2] = -0.00004f;  // rounds to zero, keeps its sign
  image[3] = 1.0f;
  image[4] = -1.0f;
  image[5] = 0.0f;
  const std::string path = dir.file("out.txt");
  {
    auto sink = make_text_sink(path, 1);
    CHECK(sink->path() == path);
    sink->append(image.data(), 0, 1);
    CHECK(!std::filesystem::exists(path));  // nothing appears before commit
    sink->commit();
  }
  const std::string bytes = read_file(path);
  CHECK(bytes.rfind("1\n0.5000 -0.2500 -0.0000 1.0000 -1.0000 0.0000 ", 0) == 0);
  CHECK(bytes == "1\n" + printf_line(image.data()));
  CHECK(bytes.substr(bytes.size() - 2) == " \n");
  CHECK(dir.entries() == 1);
}

TEST_CASE("text sink: exact bytes of two images, in one run or two") {
  TempDir dir;
  const std::vector<float> images = random_images(2, 2, -1.0f, 1.0f);
  const std::string expected = "2\n" + printf_line(images.data()) + printf_line(images.data() + kImageValues);
  {
    auto sink = make_text_sink(dir.file("a.txt"), 2);
    sink->append(images.data(), 0, 2);
    sink->commit();
  }
  {
    auto sink = make_text_sink(dir.file("b.txt"), 2);
    sink->append(images.data(), 0, 1);
    sink->append(images.data() + kImageValues, 1, 1);
    sink->commit();
  }
  CHECK(read_file(dir.file("a.txt")) == expected);
  CHECK(read_file(dir.file("b.txt")) == expected);
}

TEST_CASE("sinks: runs must be consecutive, and commit needs every image") {
  TempDir dir;
  const std::vector<float> images = random_images(3, 3, -1.0f, 1.0f);
  for (int kind = 0; kind < 2; ++kind) {
    CAPTURE(kind);
    const std::string path = dir.file(kind == 0 ? "out.txt" : "out.bmp");
    {
      auto sink = kind == 0 ? make_text_sink(path, 3) : make_bmp_mosaic_sink(path, 3);
      CHECK_THROWS_AS(sink->append(images.data(), 1, 1), std::logic_error);  // skips image 0
      sink->append(images.data(), 0, 1);
      CHECK_THROWS_AS(sink->append(images.data(), 0, 1), std::logic_error);  // image 0 again
      CHECK_THROWS_AS(sink->append(images.data(), 1, 3), std::logic_error);  // past N
      sink->append(images.data() + kImageValues, 1, 1);
      CHECK_THROWS_AS(sink->commit(), std::logic_error);  // image 2 missing
    }
    CHECK(dir.entries() == 0);  // an uncommitted sink leaves nothing behind
  }
}

TEST_CASE("sinks: a missing output directory fails when the sink is made") {
  TempDir dir;
  const std::string path = dir.file("nope/out.txt");
  CHECK(user_error_of([&] { make_text_sink(path, 1); }) ==
        "cannot create output file " + path + ": No such file or directory (does the directory exist?)");
  CHECK(contains(user_error_of([&] { make_bmp_mosaic_sink(dir.file("nope/out.bmp"), 1); }),
                 "(does the directory exist?)"));
}

TEST_CASE("text formatter: identical to snprintf(\"%.4f \") on edges and millions of values") {
  std::vector<float> values;
  const float edges[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.00005f, -0.00005f, 0.00004f, -0.00004f, 0.99995f,
                         -0.99995f, 9.99995f, 99.99995f, 12345.6789f, -12345.6789f, 0.5f, -0.5f,
                         0.03125f, 0.09375f, -0.03125f, 1e-45f, -1e-45f, FLT_MIN, -FLT_MIN, FLT_MAX, -FLT_MAX,
                         1099511627776.0f /* 2^40 */, 1e12f, 1e20f, 3e38f,
                         std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()};
  for (float e : edges) {
    float v = e;
    for (int i = 0; i < 4; ++i) v = std::nextafter(v, -INFINITY);
    for (int i = 0; i < 9; ++i, v = std::nextafter(v, INFINITY)) values.push_back(v);
  }
  // Every rounding boundary (k + 0.5) / 10^4 in [-3, 3], with its neighbors.
  for (int k = -30000; k <= 30000; ++k) {
    float v = static_cast<float>((k + 0.5) / 1e4);
    for (int i = 0; i < 2; ++i) v = std::nextafter(v, -INFINITY);
    for (int i = 0; i < 5; ++i, v = std::nextafter(v, INFINITY)) values.push_back(v);
  }
  // Exact ties: odd multiples of 1/32, times 10^4, end in .5.
  for (int m = -64001; m <= 64001; m += 2) values.push_back(static_cast<float>(m) / 32.0f);
  Lcg rng{42};
  for (int i = 0; i < 1000000; ++i) values.push_back(float_from_bits(rng.bits32()));  // every exponent
  for (int i = 0; i < 1000000; ++i) values.push_back(rng.uniform(-1.0f, 1.0f));       // the images' range
  for (int i = 0; i < 500000; ++i) {                                                   // |v| < 2^40, log-spread
    const uint32_t exponent = 100 + rng.bits32() % 67;
    values.push_back(float_from_bits((rng.bits32() & 0x807fffffu) | (exponent << 23)));
  }
  REQUIRE(values.size() > 2800000);
  CHECK(formatter_mismatches(values) == 0);
}

TEST_CASE("text formatter: one image line is its values and a newline") {
  const std::vector<float> image = random_images(1, 9, -1.0f, 1.0f);
  std::vector<char> out(max_image_text_bytes(kImageValues));
  const size_t n = format_image_text(image.data(), out.data(), kImageValues);
  CHECK(std::string(out.data(), n) == printf_line(image.data()));

  // The bound holds for the longest values there are.
  std::vector<float> longest(kImageValues, -FLT_MAX);
  CHECK(format_image_text(longest.data(), out.data(), kImageValues) == max_image_text_bytes(kImageValues));
}

TEST_CASE("bmp sink: exact bytes for 1, 2 and 5 images (1x1, 2x2 and 3x3 tiles, black where unused)") {
  TempDir dir;
  for (int64_t n : {1, 2, 5}) {
    CAPTURE(n);
    std::vector<float> images = random_images(n, 100 + n, -1.1f, 1.1f);
    images[7] = std::numeric_limits<float>::quiet_NaN();
    const std::string path = dir.file("mosaic" + std::to_string(n) + ".bmp");
    {
      auto sink = make_bmp_mosaic_sink(path, n);
      for (int64_t first = 0; first < n; first += 2) {
        const int64_t count = std::min<int64_t>(2, n - first);
        sink->append(images.data() + first * kImageValues, first, count);
      }
      CHECK(!std::filesystem::exists(path));
      sink->commit();
    }
    const std::string bytes = read_file(path);
    const std::string expected = expected_bmp(images, n);
    CHECK(bytes.size() == expected.size());
    CHECK(bytes.substr(0, 54) == expected.substr(0, 54));
    CHECK(bytes == expected);
  }
  CHECK(dir.entries() == 3);
}

TEST_CASE("bmp sink: a failed write at the mosaic's offsets is reported, no file left") {
  TempDir dir;
  const int64_t n = 100;  // 640 x 640 x 3 = 1.2 MB, more than the stdio buffer
  const std::vector<float> images = random_images(n, 5, -1.0f, 1.0f);
  const std::string path = dir.file("big.bmp");
  {
    auto sink = make_bmp_mosaic_sink(path, n);
    sink->append(images.data(), 0, n - 1);
    FileSizeLimit limit(100000);
    // The last image's tile row lies at the start of the file's pixels, but its rows reach past the limit.
    const std::string message = user_error_of([&] { sink->append(images.data() + (n - 1) * kImageValues, n - 1, 1); });
    CHECK(message == "writing " + path + " failed: File too large (the file size limit, ulimit -f)");
  }
  CHECK(dir.entries() == 0);
}

TEST_CASE("bmp sink: a mosaic beyond the writer's 2 GiB is refused before any work") {
  TempDir dir;
  const std::string message = user_error_of([&] { make_bmp_mosaic_sink(dir.file("huge.bmp"), 200000); });
  CHECK(contains(message, "200,000 images"));
  CHECK(contains(message, "28,672 x 28,672"));
  CHECK(dir.entries() == 0);
}

TEST_CASE("channel_to_byte: (v + 1) / 2 * 255 in float, truncated, clamped, NaN to 0") {
  CHECK(channel_to_byte(-1.0f) == 0);
  CHECK(channel_to_byte(1.0f) == 255);
  CHECK(channel_to_byte(0.0f) == 127);  // 127.5
  CHECK(channel_to_byte(-0.0f) == 127);
  CHECK(channel_to_byte(0.5f) == 191);   // 191.25
  CHECK(channel_to_byte(-0.5f) == 63);   // 63.75
  CHECK(channel_to_byte(0.99f) == 253);  // 253.725
  CHECK(channel_to_byte(-0.999f) == 0);  // 0.1275
  CHECK(channel_to_byte(-2.0f) == 0);
  CHECK(channel_to_byte(2.0f) == 255);
  CHECK(channel_to_byte(1.0000001f) == 255);
  CHECK(channel_to_byte(-1e30f) == 0);
  CHECK(channel_to_byte(std::numeric_limits<float>::infinity()) == 255);
  CHECK(channel_to_byte(-std::numeric_limits<float>::infinity()) == 0);
  CHECK(channel_to_byte(std::numeric_limits<float>::quiet_NaN()) == 0);
  CHECK(channel_to_byte(-std::numeric_limits<float>::quiet_NaN()) == 0);

  // Against a double-precision reference wherever float rounding cannot decide the integer part.
  Lcg rng{77};
  int checked = 0;
  for (int i = 0; i < 200000; ++i) {
    const float v = rng.uniform(-1.0f, 1.0f);
    const double exact = (double{v} + 1.0) / 2.0 * 255.0;
    if (std::fabs(exact - std::round(exact)) < 1e-4) continue;
    ++checked;
    REQUIRE(channel_to_byte(v) == static_cast<int>(std::floor(exact)));
  }
  CHECK(checked > 190000);
}

TEST_CASE("mosaic_side: exact ceil(sqrt(n)) for small and huge n") {
  const int64_t small[] = {0, 1, 2, 2, 2, 3, 3, 3, 3, 3, 4};
  for (int64_t n = 0; n <= 10; ++n) CHECK(mosaic_side(n) == small[n]);
  int64_t side = 0;
  for (int64_t n = 0; n <= 200000; ++n) {
    while (side * side < n) ++side;
    REQUIRE(mosaic_side(n) == side);
  }
  for (int64_t k : {int64_t{1000000}, int64_t{94906265}, int64_t{2147483647}, int64_t{3037000499}}) {
    CAPTURE(k);
    CHECK(mosaic_side(k * k) == k);
    CHECK(mosaic_side(k * k - 1) == k);
    CHECK(mosaic_side(k * k + 1) == k + 1);
  }
  CHECK(mosaic_side(std::numeric_limits<int64_t>::max()) == 3037000500);
  CHECK_THROWS_AS(mosaic_side(-1), std::invalid_argument);
}

TEST_CASE("AtomicFile: destroyed before commit, it leaves no file") {
  TempDir dir;
  const std::string path = dir.file("x.txt");
  std::string temp;
  {
    AtomicFile file(path);
    temp = file.temp_path();
    CHECK(temp.rfind(path + ".tmp-", 0) == 0);
    CHECK(temp.size() == path.size() + 11);
    file.write("abc", 3);
    CHECK(std::filesystem::exists(temp));
    CHECK(!std::filesystem::exists(path));
  }
  CHECK(!std::filesystem::exists(temp));
  CHECK(dir.entries() == 0);

  AtomicFile abandoned(path);
  temp = abandoned.temp_path();
  abandoned.abandon();
  CHECK(!std::filesystem::exists(temp));
  CHECK_THROWS_AS(abandoned.write("x", 1), std::logic_error);
  CHECK_THROWS_AS(abandoned.commit(), std::logic_error);
}

TEST_CASE("AtomicFile: an existing file stays untouched until commit replaces it") {
  TempDir dir;
  const std::string path = dir.file("x.txt");
  write_file(path, "old contents");
  {
    AtomicFile file(path);
    file.write("new", 3);
    CHECK(read_file(path) == "old contents");
  }
  CHECK(read_file(path) == "old contents");
  {
    AtomicFile file(path);
    std::string big(3 << 20, 'z');  // more than the stdio buffer, so it reaches the temporary file
    file.write(big.data(), big.size());
    CHECK(read_file(path) == "old contents");
    file.commit();
    CHECK(file.committed());
    CHECK(read_file(path) == big);
    CHECK_THROWS_AS(file.write("x", 1), std::logic_error);
    CHECK_THROWS_AS(file.commit(), std::logic_error);
  }
  CHECK(dir.entries() == 1);

  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  const mode_t mask = ::umask(022);
  ::umask(mask);
  CHECK((st.st_mode & 0777) == (0644 & ~mask));
}

TEST_CASE("AtomicFile: clear errors for a missing directory, a directory in the way, a write failure") {
  TempDir dir;
  const std::string missing = dir.file("nope/x.txt");
  CHECK(user_error_of([&] { AtomicFile file(missing); }) ==
        "cannot create output file " + missing + ": No such file or directory (does the directory exist?)");

  std::filesystem::create_directory(dir.file("sub"));
  CHECK(contains(user_error_of([&] { AtomicFile file(dir.file("sub")); }), "a directory of that name exists"));

  const std::string path = dir.file("x.txt");
  {
    AtomicFile file(path);
    std::string big(3 << 20, 'z');
    FileSizeLimit limit(1 << 20);
    CHECK(user_error_of([&] { file.write(big.data(), big.size()); }) ==
          "writing " + path + " failed: File too large (the file size limit, ulimit -f)");
  }
  {
    AtomicFile file(path);
    file.write("0123456789", 10);
    FileSizeLimit limit(5);  // the buffered bytes fail at commit's flush
    CHECK(user_error_of([&] { file.commit(); }) == "writing " + path + " failed: File too large (the file size limit, ulimit -f)");
  }
  CHECK(dir.entries() == 1);  // only "sub"
}

TEST_CASE("grey images (nc = 1): text of 4,096 values a line, npy (N, 64, 64, 1), BMP and PNG as grey RGB") {
  TempDir dir;
  const int64_t n = 5;
  // (n, 64, 64, 1) grey images, and the same as RGB with each value repeated in R, G and B.
  std::vector<float> grey = random_images(n, 31, -1.1f, 1.1f);
  grey.resize(static_cast<size_t>(n) * 4096);
  std::vector<float> rgb(static_cast<size_t>(n) * kImageValues);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = grey[i / 3];
  SinkOptions grey_options, rgb_options;
  grey_options.image_channels = 1;
  grey_options.threads = 3;
  rgb_options.threads = 2;
  for (OutputFormat format : {OutputFormat::Text, OutputFormat::Npy, OutputFormat::Bmp, OutputFormat::Png,
                              OutputFormat::MosaicPng}) {
    CAPTURE(format_name(format));
    auto grey_sink = make_sink(format, dir.file(std::string("g-") + format_name(format)), n, grey_options);
    auto rgb_sink = make_sink(format, dir.file(std::string("c-") + format_name(format)), n, rgb_options);
    grey_sink->append(grey.data(), 0, 2);  // two runs: the second starts at an offset
    grey_sink->append(grey.data() + 2 * 4096, 2, n - 2);
    rgb_sink->append(rgb.data(), 0, n);
    grey_sink->commit();
    rgb_sink->commit();
  }
  std::string text = std::to_string(n) + "\n";
  char token[64];
  for (int64_t k = 0; k < n; ++k) {
    for (int i = 0; i < 4096; ++i) {
      std::snprintf(token, sizeof token, "%.4f ", static_cast<double>(grey[static_cast<size_t>(k * 4096 + i)]));
      text += token;
    }
    text += "\n";
  }
  CHECK(read_file(dir.file("g-txt.txt")) == text);
  const std::string npy = read_file(dir.file("g-npy.npy"));
  const std::string npy_start = std::string("\x93NUMPY\x01\x00\x76\x00", 10) +
                                "{'descr': '<f4', 'fortran_order': False, 'shape': (5, 64, 64, 1), }";
  CHECK(npy.compare(0, npy_start.size(), npy_start) == 0);
  REQUIRE(npy.size() == 128 + grey.size() * 4);
  CHECK(std::memcmp(npy.data() + 128, grey.data(), grey.size() * 4) == 0);
  CHECK(read_file(dir.file("g-bmp.bmp")) == expected_bmp(rgb, n));
  CHECK(read_file(dir.file("g-mosaic-png.png")) == read_file(dir.file("c-mosaic-png.png")));
  for (int64_t k = 0; k < n; ++k) {
    const std::string name = png_file_name(k, n, SampleFacts());
    CHECK(read_file(dir.file("g-png/" + name)) == read_file(dir.file("c-png/" + name)));
  }
  // The grey file's images differ from one another, so a mix-up of strides would show.
  CHECK(read_file(dir.file("g-png/" + png_file_name(0, n, SampleFacts()))) != read_file(dir.file("g-png/" + png_file_name(1, n, SampleFacts()))));
}
