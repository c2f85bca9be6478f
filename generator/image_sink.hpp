// image_sink.hpp: where generated images go. One implementation per output format.
//
// The pipeline hands a sink consecutive runs of images in order: append(images, first, count) with
// images (count, 64, 64, 3), C fastest, values in (-1, 1). commit() makes the output appear (atomically);
// destroying a sink that was not committed leaves no file behind.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace facegen {

class ImageSink {
 public:
  virtual ~ImageSink() = default;
  virtual void append(const float* images, int64_t first, int64_t count) = 0;
  virtual void commit() = 0;
  virtual std::string path() const = 0;  // the final path, for messages
};

// PREFIX.txt: "N\n", then one line per image: its 12,288 values in (H, W, C) order, each as
// printf's "%.4f " writes it, then "\n".
std::unique_ptr<ImageSink> make_text_sink(const std::string& path, int64_t total_images);

// PREFIX.bmp: one 24-bit mosaic of s x s tiles of 64x64, s = ceil(sqrt(N)); image n at tile row n / s,
// column n % s; unused tiles black; a channel value v becomes int((v + 1) / 2 * 255) clamped to 0..255.
std::unique_ptr<ImageSink> make_bmp_mosaic_sink(const std::string& path, int64_t total_images);

// PREFIX.npy: float32 (N, 64, 64, 3), C order, NumPy's .npy format version 1.0.
std::unique_ptr<ImageSink> make_npy_sink(const std::string& path, int64_t total_images);

// Formatting helpers, shared with tests and benchmarks.
// Bound on one formatted line: every value at its longest ("%.4f " of -FLT_MAX is 46 characters),
// then "\n". Values in (-1, 1) take 7 or 8 characters each.
constexpr size_t kMaxImageTextBytes = 12288 * 46 + 1;
size_t format_image_text(const float* image, char* out);  // one line with its "\n"; returns bytes
size_t format_value_text(float v, char* out);  // printf("%.4f ", v) exactly, at most 46 bytes, no NUL
unsigned char channel_to_byte(float v);
int64_t mosaic_side(int64_t n);  // ceil(sqrt(n)), exact for every n >= 0

}  // namespace facegen
