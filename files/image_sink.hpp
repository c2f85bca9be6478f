// image_sink.hpp: where generated images go. One implementation per output format.
//
// The pipeline hands a sink consecutive runs of images in order: append(images, first, count) with
// images (count, 64, 64, 3), C fastest, values in (-1, 1). commit() makes the output appear (atomically);
// destroying a sink that was not committed leaves no file behind.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace facegen {

class ImageSink {
 public:
  virtual ~ImageSink() = default;
  virtual void append(const float* images, int64_t first, int64_t count) = 0;
  virtual void commit() = 0;
  virtual std::string path() const = 0;  // the final path, for messages
  virtual int64_t bytes_written() const { return 0; }  // bytes of every file written so far
};

// How sinks may spend the machine: formatting and encoding threads, and the mosaic's size limit.
struct SinkOptions {
  int threads = 0;  // threads that format text and encode PNGs; 0: every hardware thread
  // Largest mosaic file, in tiles per side. N above its square splits into numbered files.
  int mosaic_tiles = 128;  // 8,192 x 8,192 pixels, 16,384 images, 201 MB of pixels per file
  std::function<void(const std::string&)> on_notice;  // told once, e.g. that a mosaic is split
};

// BMP's own limit under stb_image_write: a file of at most 2^31 - 1 bytes, 418 tiles per side.
constexpr int kMaxMosaicTiles = 418;

// PREFIX.txt: "N\n", then one line per image: its 12,288 values in (H, W, C) order, each as
// printf's "%.4f " writes it, then "\n".
// Formatting runs on options.threads threads, each on its own run of images; lines are written in order.
std::unique_ptr<ImageSink> make_text_sink(const std::string& path, int64_t total_images,
                                          const SinkOptions& options = {});

// PREFIX.bmp: one 24-bit mosaic of s x s tiles of 64x64, s = ceil(sqrt(N)); image n at tile row n / s,
// column n % s; unused tiles black; a channel value v becomes int((v + 1) / 2 * 255) clamped to 0..255.
std::unique_ptr<ImageSink> make_bmp_mosaic_sink(const std::string& path, int64_t total_images);

// The mosaic split into files of at most options.mosaic_tiles^2 images each. N at or below that
// limit: one file PREFIX.<ext>, the same bytes as make_bmp_mosaic_sink. Above: PREFIX-0001.<ext>,
// PREFIX-0002.<ext>, ..., file k holding images [(k-1) L, min(k L, N)) laid out as a mosaic of their
// own (s = ceil(sqrt(count)) tiles per side), and options.on_notice hears of it. Only the file being
// filled has pixels in memory: at most (mosaic_tiles * 64)^2 * 3 bytes.
enum class MosaicEncoding { Bmp, Png };
std::unique_ptr<ImageSink> make_mosaic_sink(MosaicEncoding encoding, const std::string& prefix, int64_t total_images,
                                             const SinkOptions& options);
// The mosaic files' paths for N images, in order (one path when N fits one file).
std::vector<std::string> mosaic_paths(const std::string& prefix, const char* extension, int64_t total_images,
                                      int mosaic_tiles);

// PREFIX/ (a folder): one PNG per image, 000000.png, 000001.png, ... (more digits past a million),
// 8-bit RGB, the mosaic's channel_to_byte mapping. The folder is built as PREFIX.tmp-XXXXXX and renamed
// into place at commit, replacing an older folder of that name only then. Encoding runs on
// options.threads threads.
std::unique_ptr<ImageSink> make_png_folder_sink(const std::string& folder, int64_t total_images,
                                                const SinkOptions& options = {});
std::string png_file_name(int64_t index, int64_t total_images);  // "000042.png"

// PREFIX.npy: float32 (N, 64, 64, 3), C order, NumPy's .npy format version 1.0.
std::unique_ptr<ImageSink> make_npy_sink(const std::string& path, int64_t total_images);
// The .npy header of N images, padded so that the data starts on a 64-byte boundary.
std::string npy_header(int64_t total_images);

// Formatting helpers, shared with tests and benchmarks.
// Bound on one formatted line: every value at its longest ("%.4f " of -FLT_MAX is 46 characters),
// then "\n". Values in (-1, 1) take 7 or 8 characters each.
constexpr size_t kMaxImageTextBytes = 12288 * 46 + 1;
size_t format_image_text(const float* image, char* out);  // one line with its "\n"; returns bytes
size_t format_value_text(float v, char* out);  // printf("%.4f ", v) exactly, at most 46 bytes, no NUL
unsigned char channel_to_byte(float v);
int64_t mosaic_side(int64_t n);  // ceil(sqrt(n)), exact for every n >= 0

}  // namespace facegen
