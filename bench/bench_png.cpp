// bench_png.cpp: `make bench-png`, the PNG encoder (formats/png_encoder.hpp) by level on real faces:
// MB/s and images/s per thread and bytes per 64x64 image, then a mosaic of 16,384 faces (8,192 x
// 8,192 pixels) by thread count. stb_image_write (zlib level 8, adaptive filters), which encoded our
// PNGs before, is the baseline beside them.
//
// Every level is checked before it is timed: each face's PNG is inflated by zlib (a decoder that is
// not ours) back to its pixels, and the mosaic's bytes must be the same for every thread count. A
// mismatch prints the first few and exits 1; the run ends with one verdict line.
//
//   make bench-png, or by hand: build/facegen --device cpu --random 256 --formats npy --output /tmp/faces
//   build/facegen-bench-png --npy /tmp/faces.npy [--seconds S] [--mosaic-threads 1,2]
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "common/model_shape.hpp"
#include "formats/output_format.hpp"
#include "formats/png_encoder.hpp"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb_image_write.h>
#pragma GCC diagnostic pop

using namespace facegen;

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kFaceBytes = int64_t{kImageSize} * kImageSize * 3;  // one 8-bit RGB face

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The faces of a float32 (N, 64, 64, 3) .npy file as 8-bit RGB, as the png format converts them.
std::vector<unsigned char> read_faces(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) {
    std::fprintf(stderr, "%s: not a .npy file\n", path.c_str());
    std::exit(1);
  }
  const size_t header = 10 + (static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8);
  const size_t values = (bytes.size() - header) / sizeof(float);
  if (bytes.find("'<f4'") > header || values % kImageValues != 0 || values == 0) {
    std::fprintf(stderr, "%s: expected float32 (N, 64, 64, 3) images\n", path.c_str());
    std::exit(1);
  }
  std::vector<float> images(values);
  std::memcpy(images.data(), bytes.data() + header, values * sizeof(float));
  std::vector<unsigned char> rgb(values);
  for (size_t k = 0; k < values; ++k) rgb[k] = channel_to_byte(images[k]);
  return rgb;
}

uint32_t be32(const unsigned char* b) {
  return uint32_t{b[0]} << 24 | uint32_t{b[1]} << 16 | uint32_t{b[2]} << 8 | b[3];
}

// Inflates a PNG's IDAT data with zlib and compares the unfiltered rows with `rgb`.
bool decodes_to(const std::string& png, const unsigned char* rgb, int64_t width, int64_t height) {
  const auto* p = reinterpret_cast<const unsigned char*>(png.data());
  std::string stream;
  for (size_t at = 8; at + 12 <= png.size(); at += 12 + be32(p + at)) {
    if (std::memcmp(p + at + 4, "IDAT", 4) == 0) stream.append(png, at + 8, be32(p + at));
  }
  const int64_t stride = width * 3 + 1;
  std::vector<unsigned char> filtered(static_cast<size_t>(stride * height));
  uLongf got = static_cast<uLongf>(filtered.size());
  if (uncompress(filtered.data(), &got, reinterpret_cast<const Bytef*>(stream.data()), stream.size()) != Z_OK ||
      got != filtered.size()) {
    return false;
  }
  for (int64_t r = 0; r < height; ++r) {  // filter 0 (none) or 1 (Sub, the byte 3 to the left added back)
    const unsigned char type = filtered[r * stride];
    const unsigned char* row = rgb + r * (stride - 1);
    for (int64_t x = 0; x < stride - 1; ++x) {
      const unsigned char left = type == 1 && x >= 3 ? row[x - 3] : 0;
      if (type > 1 || static_cast<unsigned char>(filtered[r * stride + 1 + x] + left) != row[x]) return false;
    }
  }
  return true;
}

struct Rate {
  int64_t images = 0;
  int64_t bytes = 0;  // encoded
  double seconds = 0;
};

// Encodes faces (cycling through them) on this thread for about `seconds`.
Rate time_faces(const std::vector<unsigned char>& faces, double seconds,
                const std::function<size_t(const unsigned char*)>& encode) {
  const int64_t count = static_cast<int64_t>(faces.size()) / kFaceBytes;
  Rate rate;
  const auto start = Clock::now();
  do {
    for (int64_t k = 0; k < count; ++k) rate.bytes += static_cast<int64_t>(encode(faces.data() + k * kFaceBytes));
    rate.images += count;
    rate.seconds = seconds_since(start);
  } while (rate.seconds < seconds);
  return rate;
}

void print_rate(const char* name, const Rate& rate) {
  std::printf("%-30s %10.1f %14.0f %12.0f\n", name, rate.images * kFaceBytes / 1e6 / rate.seconds,
              rate.images / rate.seconds, static_cast<double>(rate.bytes) / rate.images);
}

// A 128 x 128 mosaic of the faces, cycling, rows top-down.
std::vector<unsigned char> mosaic_of(const std::vector<unsigned char>& faces, int64_t side) {
  const int64_t count = static_cast<int64_t>(faces.size()) / kFaceBytes;
  const int64_t width = side * kImageSize;
  std::vector<unsigned char> rgb(static_cast<size_t>(width * width * 3));
  for (int64_t tile = 0; tile < side * side; ++tile) {
    const unsigned char* face = faces.data() + (tile % count) * kFaceBytes;
    for (int64_t r = 0; r < kImageSize; ++r) {
      const int64_t y = (tile / side) * kImageSize + r, x = (tile % side) * kImageSize;
      std::memcpy(&rgb[(y * width + x) * 3], face + r * kImageSize * 3, kImageSize * 3);
    }
  }
  return rgb;
}

std::vector<int> int_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::atoi(item.c_str()));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string npy;
  double seconds = 1.0;
  std::vector<int> mosaic_threads = {1, 2};
  std::vector<int> mosaic_levels = {0, 1, 6};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--npy") == 0) npy = argv[i + 1];
    if (std::strcmp(argv[i], "--seconds") == 0) seconds = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--mosaic-threads") == 0) mosaic_threads = int_list(argv[i + 1]);
    if (std::strcmp(argv[i], "--mosaic-levels") == 0) mosaic_levels = int_list(argv[i + 1]);
  }
  if (npy.empty()) {
    std::fprintf(stderr, "usage: facegen-bench-png --npy FACES.npy [--seconds S] [--mosaic-threads 1,2] "
                         "[--mosaic-levels 0,1,6]\n");
    return 1;
  }
  const std::vector<unsigned char> faces = read_faces(npy);
  const int64_t count = static_cast<int64_t>(faces.size()) / kFaceBytes;
  int failures = 0;

  // --- every level checked on every face, then timed on one thread ---
  const std::vector<int> levels = {0, 1, 2, 3, 4, 6, 9, 12};
  for (int level : levels) {
    PngEncoder encoder(level);
    std::string png;
    for (int64_t k = 0; k < count; ++k) {
      encoder.encode(faces.data() + k * kFaceBytes, kImageSize, kImageSize, png);
      if (!decodes_to(png, faces.data() + k * kFaceBytes, kImageSize, kImageSize) && ++failures <= 5)
        std::printf("MISMATCH: level %d, face %lld does not decode to its pixels\n", level, static_cast<long long>(k));
    }
  }
  std::printf("png check: %s (%lld faces from %s, %zu levels, inflated by zlib)\n\n", failures == 0 ? "OK" : "MISMATCH",
              static_cast<long long>(count), npy.c_str(), levels.size());
  if (failures != 0) return 1;

  std::printf("one thread, 64x64 faces        %10s %14s %12s\n", "MB/s", "images/s", "bytes/image");
  std::string stb_png;
  stbi_write_png_compression_level = 8;
  print_rate("stb_image_write (zlib 8)", time_faces(faces, seconds, [&](const unsigned char* face) {
               stb_png.clear();
               stbi_write_png_to_func(
                   [](void* context, void* data, int size) {
                     static_cast<std::string*>(context)->append(static_cast<const char*>(data), size);
                   },
                   &stb_png, kImageSize, kImageSize, 3, face, kImageSize * 3);
               return stb_png.size();
             }));
  for (int level : levels) {
    PngEncoder encoder(level);
    std::string png;
    char name[64];
    std::snprintf(name, sizeof name, "level %d%s", level, level == kDefaultPngLevel ? " (default)" : "");
    print_rate(name, time_faces(faces, seconds, [&](const unsigned char* face) {
                 encoder.encode(face, kImageSize, kImageSize, png);
                 return png.size();
               }));
  }

  // --- the mosaic: same bytes for every thread count, then seconds by thread count ---
  constexpr int64_t kSide = 128;
  const std::vector<unsigned char> mosaic = mosaic_of(faces, kSide);
  std::printf("\nmosaic of %lld faces (%lld x %lld pixels, %.1f MB of pixels), bands of %lld rows\n",
              static_cast<long long>(kSide * kSide), static_cast<long long>(kSide * kImageSize),
              static_cast<long long>(kSide * kImageSize), mosaic.size() / 1e6,
              static_cast<long long>(png_band_rows(kSide * kImageSize)));
  for (int level : mosaic_levels) {
    std::string first;
    for (int threads : mosaic_threads) {
      std::string png;
      const auto start = Clock::now();
      encode_png_in_bands(mosaic.data(), kSide * kImageSize, kSide * kImageSize, level, threads,
                          [&](const void* data, int64_t n) { png.append(static_cast<const char*>(data), n); });
      const double took = seconds_since(start);
      const bool same = first.empty() || png == first;
      if (first.empty()) {
        first = png;
        if (!decodes_to(png, mosaic.data(), kSide * kImageSize, kSide * kImageSize)) {
          std::printf("MISMATCH: the level %d mosaic does not decode to its pixels\n", level);
          ++failures;
        }
      }
      if (!same) ++failures;
      std::printf("level %2d, %2d threads: %7.3f s  %8.1f MB  %s\n", level, threads, took, png.size() / 1e6,
                  same ? "" : "MISMATCH: bytes differ from the first thread count");
    }
  }
  std::printf("\n%s\n", failures == 0
                           ? "verdict: OK (every PNG decodes to its pixels, mosaics identical by thread count)"
                           : "verdict: FAILED");
  return failures == 0 ? 0 : 1;
}
