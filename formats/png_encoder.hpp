// png_encoder.hpp: 8-bit RGB PNG files made by our own container code (signature, IHDR, IDAT, IEND,
// each chunk with its CRC-32) over a compression level, for the png folder and the mosaic PNG
// (output_format.hpp), and later the tar shards that embed the same PNGs.
//
// Pixels are (height, width, 3) bytes, rows top-down, R G B fastest. Every row has the same filter,
// chosen by the level alone (none at level 0, Sub above it), never searched per row: the bytes are
// the same on every machine and thread count, and a per-row search costs more time at fast levels
// than the bytes it saves are worth.
//
// Levels (--png-level): 0 writes stored deflate blocks (no compression, at the speed of a copy);
// 1-12 are libdeflate's levels for one picture. A mosaic is compressed in bands of rows on several
// threads and joined into one zlib stream as pigz does; its bands go through zlib, whose levels stop
// at 9, so levels 10-12 are zlib's 9 there. Checksums (CRC-32, Adler-32) are libdeflate's.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

struct libdeflate_compressor;

namespace facegen {

constexpr int kMaxPngLevel = 12;
// The level when --png-level is not given: stored. Measured on faces (bench/bench_png.cpp,
// BENCHMARKS.md), it encodes about 670,000 images/s on one core, where level 1 makes 11,700 (a GPU
// making a million images/s would need 85 cores to compress them), and its 12.4 KB files are only
// 1.7 times level 1's 7.3 KB (1.3 times stb_image_write's at zlib level 8).
constexpr int kDefaultPngLevel = 0;

// One picture at a time, reused: one encoder per thread. Its buffers and libdeflate's compressor
// are kept between pictures, so encoding allocates nothing once the first picture of a size is made.
class PngEncoder {
 public:
  explicit PngEncoder(int level);  // 0..kMaxPngLevel; throws std::invalid_argument otherwise
  ~PngEncoder();
  PngEncoder(const PngEncoder&) = delete;
  PngEncoder& operator=(const PngEncoder&) = delete;

  int level() const { return level_; }
  // The PNG of `rgb` (height, width, 3) in `png` (replacing what it held), one IDAT chunk.
  void encode(const unsigned char* rgb, int64_t width, int64_t height, std::string& png);

 private:
  int level_;
  libdeflate_compressor* compressor_ = nullptr;  // levels 1-12
  std::string filtered_;                         // the rows, each after its filter byte
};

// The encoder of this thread for `level` (made on first use, remade when the level changes).
PngEncoder& thread_png_encoder(int level);

// A level-0 PNG of a (height, width, 3) picture as a template and the places in it that depend on the
// pixels, for the encoders that fill in a template (formats/encoded_run.hpp, the GPU's
// kernels/encode_images.hpp). The template is this encoder's own PNG of black pixels, so every byte
// that is neither a pixel nor a checksum is this file's. The zlib stream's raw bytes (each row's
// filter byte, then its 3 width pixel bytes, row after row) are stored in blocks of block_bytes (the
// last may hold fewer), each after a block_header of 5 bytes; raw byte r is at raw_at(r).
struct PngStoredLayout {
  int64_t width = 0, height = 0;
  std::string bytes;             // the template: the whole file
  int64_t crc_from = 0;          // the IDAT chunk's type: its CRC-32 covers [crc_from, crc_at)
  int64_t crc_at = 0;            // the IDAT chunk's CRC-32, big-endian
  int64_t blocks_at = 0;         // the first stored block's header, after the zlib header
  int64_t adler_at = 0;          // the Adler-32 of the raw bytes, big-endian
  int64_t raw_bytes = 0;         // height (3 width + 1)
  int64_t block_bytes = 0;       // raw bytes of a full stored block
  int64_t block_header = 0;      // bytes before each block's raw bytes
  int64_t row_bytes() const { return 3 * width + 1; }  // one row of raw bytes: its filter byte, then its pixels
  int64_t raw_at(int64_t r) const {
    return blocks_at + r / block_bytes * (block_bytes + block_header) + block_header + r % block_bytes;
  }
};
// The layout of a level-0 PNG of width x height pixels, made once per size and kept; any thread.
const PngStoredLayout& png_stored_layout(int64_t width, int64_t height);

// Receives a mosaic PNG's bytes in order, from the calling thread; may throw (UserError for a
// failed write), which ends the encoding.
using PngByteSink = std::function<void(const void* data, int64_t bytes)>;

// Rows per band of a picture `width` pixels wide: about 1 MiB of filtered rows, whatever the thread
// count, so that the bytes do not depend on it.
int64_t png_band_rows(int64_t width);

// The PNG of `rgb` (height, width, 3), compressed in bands of `band_rows` rows (0: png_band_rows)
// on `threads` threads (<= 0: every CPU), each band one IDAT chunk, written to `sink` in order. The
// same bytes for every thread count. Holds at most a few compressed bands per thread at once.
// Returns the PNG's bytes.
int64_t encode_png_in_bands(const unsigned char* rgb, int64_t width, int64_t height, int level, int threads,
                            const PngByteSink& sink, int64_t band_rows = 0);

}  // namespace facegen
