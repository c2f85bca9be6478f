// png_encoder.cpp: the PNG container and its zlib stream (see png_encoder.hpp). A zlib stream is a
// 2-byte header, deflate blocks, and the Adler-32 of the uncompressed bytes, big-endian. A picture
// alone is one libdeflate call (or our stored blocks at level 0). A mosaic is cut into bands of rows
// whose raw deflate streams end on a byte boundary (zlib's Z_SYNC_FLUSH, Z_FINISH for the last), so
// that their concatenation is one deflate stream; the bands' Adler-32s are joined by adler32_combine.
#include "formats/png_encoder.hpp"

#include <libdeflate.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/threads.hpp"

namespace facegen {
namespace {

constexpr unsigned char kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
constexpr int64_t kStoredBlockMax = 65535;     // deflate's LEN field
constexpr int64_t kStoredBlockHeader = 5;      // BFINAL and BTYPE in a byte, LEN and NLEN
constexpr int64_t kBandBytes = int64_t{1} << 20;
// A chunk's length is at most 2^31 - 1; one picture is one IDAT, so its stream must fit.
constexpr int64_t kMaxChunkData = std::numeric_limits<int32_t>::max();

void put_be32(unsigned char* at, uint32_t v) {
  at[0] = static_cast<unsigned char>(v >> 24);
  at[1] = static_cast<unsigned char>(v >> 16);
  at[2] = static_cast<unsigned char>(v >> 8);
  at[3] = static_cast<unsigned char>(v);
}

void append_be32(std::string& out, uint32_t v) {
  unsigned char bytes[4];
  put_be32(bytes, v);
  out.append(reinterpret_cast<const char*>(bytes), 4);
}

// The CRC-32 of a chunk covers its type and data, not its length.
uint32_t chunk_crc(const unsigned char* type_and_data, size_t bytes) {
  return static_cast<uint32_t>(libdeflate_crc32(0, type_and_data, bytes));
}

// Appends the signature and IHDR: 8-bit RGB, no interlace.
void append_png_prefix(int64_t width, int64_t height, std::string& out) {
  out.append(reinterpret_cast<const char*>(kSignature), sizeof kSignature);
  append_be32(out, 13);
  const size_t ihdr = out.size();
  out += "IHDR";
  append_be32(out, static_cast<uint32_t>(width));
  append_be32(out, static_cast<uint32_t>(height));
  out.append("\x08\x02\x00\x00\x00", 5);  // bit depth 8, colour type 2 (RGB), deflate, filters, no interlace
  append_be32(out, chunk_crc(reinterpret_cast<const unsigned char*>(out.data()) + ihdr, 4 + 13));
}

void append_iend(std::string& out) {
  append_be32(out, 0);
  out += "IEND";
  append_be32(out, chunk_crc(reinterpret_cast<const unsigned char*>("IEND"), 4));
}

// The zlib header that announces `level`: deflate with a 32 KiB window, FLEVEL as zlib sets it (a
// hint only), FCHECK making the 16 bits a multiple of 31.
void append_zlib_header(std::string& out, int level) {
  const unsigned cmf = 0x78;
  const unsigned flevel = level < 2 ? 0 : level < 6 ? 1 : level == 6 ? 2 : 3;
  unsigned flg = flevel << 6;
  flg += 31 - (cmf * 256 + flg) % 31;
  out.push_back(static_cast<char>(cmf));
  out.push_back(static_cast<char>(flg));
}

// The filter of every row: none where the bytes are stored as they are (level 0), else Sub (each
// byte less the same channel of the pixel to its left), which made faces 13% smaller at level 1 for
// no measurable time (bench/bench_png.cpp, BENCHMARKS.md); Up, Average and Paeth saved at most 3%
// more and cost up to 45% of the speed.
enum PngFilter : unsigned char { kFilterNone = 0, kFilterSub = 1 };
PngFilter filter_for(int level) { return level == 0 ? kFilterNone : kFilterSub; }

// The rows of `rgb`, each after its filter byte, into `out` (resized).
void filter_rows(const unsigned char* rgb, int64_t width, int64_t rows, PngFilter filter, std::string& out) {
  const int64_t stride = width * 3;
  out.resize(static_cast<size_t>(rows * (stride + 1)));
  unsigned char* to = reinterpret_cast<unsigned char*>(&out[0]);
  for (int64_t r = 0; r < rows; ++r, to += stride + 1) {
    const unsigned char* row = rgb + r * stride;
    to[0] = filter;
    if (filter == kFilterNone) {
      std::memcpy(to + 1, row, static_cast<size_t>(stride));
      continue;
    }
    std::memcpy(to + 1, row, 3);  // the first pixel has nothing to its left
    for (int64_t x = 3; x < stride; ++x) to[1 + x] = static_cast<unsigned char>(row[x] - row[x - 3]);
  }
}

int64_t filtered_bytes(int64_t width, int64_t rows) { return rows * (width * 3 + 1); }

// Deflate stored blocks (BTYPE 00) of at most 65,535 bytes holding `data`; the last block is final
// when `final` is (the stream's end).
void append_stored_blocks(const std::string& data, bool final, std::string& out) {
  const int64_t total = static_cast<int64_t>(data.size());
  int64_t done = 0;
  do {
    const int64_t len = std::min(kStoredBlockMax, total - done);
    const bool last = done + len == total;
    const unsigned char header[kStoredBlockHeader] = {
        static_cast<unsigned char>(final && last ? 1 : 0),  // BFINAL, BTYPE 00, padding to the byte
        static_cast<unsigned char>(len), static_cast<unsigned char>(len >> 8), static_cast<unsigned char>(~len),
        static_cast<unsigned char>(~len >> 8)};
    out.append(reinterpret_cast<const char*>(header), kStoredBlockHeader);
    out.append(data, static_cast<size_t>(done), static_cast<size_t>(len));
    done += len;
  } while (done < total);
}

void check_size(int64_t width, int64_t height) {
  if (width < 1 || height < 1 || width > std::numeric_limits<int32_t>::max() ||
      height > std::numeric_limits<int32_t>::max()) {
    throw std::invalid_argument("png: a picture of " + std::to_string(width) + " x " + std::to_string(height) +
                                " pixels");
  }
}

void check_level(int level) {
  if (level < 0 || level > kMaxPngLevel) throw std::invalid_argument("png: level " + std::to_string(level));
}

}  // namespace

PngEncoder::PngEncoder(int level) : level_(level) {
  check_level(level);
  if (level > 0) {
    compressor_ = libdeflate_alloc_compressor(level);
    if (compressor_ == nullptr) throw std::bad_alloc();
  }
}

PngEncoder::~PngEncoder() { libdeflate_free_compressor(compressor_); }

void PngEncoder::encode(const unsigned char* rgb, int64_t width, int64_t height, std::string& png) {
  check_size(width, height);
  filter_rows(rgb, width, height, filter_for(level_), filtered_);
  png.clear();  // keeps its capacity: no allocation once a picture of this size was made
  append_png_prefix(width, height, png);
  const size_t idat = png.size();
  png.append(4, '\0');  // the length, once known
  png += "IDAT";
  if (level_ == 0) {
    append_zlib_header(png, 0);
    append_stored_blocks(filtered_, true, png);
    append_be32(png, static_cast<uint32_t>(libdeflate_adler32(1, filtered_.data(), filtered_.size())));
  } else {
    const size_t data = png.size();
    png.resize(data + libdeflate_zlib_compress_bound(compressor_, filtered_.size()));
    const size_t bytes =
        libdeflate_zlib_compress(compressor_, filtered_.data(), filtered_.size(), &png[data], png.size() - data);
    if (bytes == 0) throw std::logic_error("png: libdeflate's output passed its own bound");
    png.resize(data + bytes);
  }
  const int64_t data_bytes = static_cast<int64_t>(png.size() - idat) - 8;
  if (data_bytes > kMaxChunkData) throw std::invalid_argument("png: a picture too large for one IDAT chunk");
  put_be32(reinterpret_cast<unsigned char*>(&png[idat]), static_cast<uint32_t>(data_bytes));
  append_be32(png, chunk_crc(reinterpret_cast<const unsigned char*>(png.data()) + idat + 4, png.size() - idat - 4));
  append_iend(png);
}

PngEncoder& thread_png_encoder(int level) {
  thread_local std::unique_ptr<PngEncoder> encoder;
  if (!encoder || encoder->level() != level) encoder = std::make_unique<PngEncoder>(level);
  return *encoder;
}

namespace {

// The offsets of a level-0 PNG (PngStoredLayout), from the order in which encode() appends its parts:
// the signature and IHDR (append_png_prefix), IDAT's length and type, the 2-byte zlib header, the
// stored blocks, the Adler-32, the CRC-32, then IEND. Checked against the template itself.
PngStoredLayout make_stored_layout(int64_t width, int64_t height) {
  PngStoredLayout layout;
  layout.width = width;
  layout.height = height;
  const std::string black(static_cast<size_t>(width * height * 3), '\0');
  PngEncoder(0).encode(reinterpret_cast<const unsigned char*>(black.data()), width, height, layout.bytes);
  std::string prefix;
  append_png_prefix(width, height, prefix);
  layout.crc_from = static_cast<int64_t>(prefix.size()) + 4;
  layout.blocks_at = layout.crc_from + 4 + 2;
  layout.raw_bytes = filtered_bytes(width, height);
  layout.block_bytes = kStoredBlockMax;
  layout.block_header = kStoredBlockHeader;
  const int64_t blocks = std::max<int64_t>(1, (layout.raw_bytes + kStoredBlockMax - 1) / kStoredBlockMax);
  layout.adler_at = layout.blocks_at + blocks * kStoredBlockHeader + layout.raw_bytes;
  layout.crc_at = layout.adler_at + 4;
  std::string iend;
  append_iend(iend);
  if (layout.crc_at + 4 + static_cast<int64_t>(iend.size()) != static_cast<int64_t>(layout.bytes.size()) ||
      layout.bytes.compare(static_cast<size_t>(layout.crc_from), 4, "IDAT") != 0) {
    throw std::logic_error("png: the stored layout does not match the encoder's bytes");
  }
  return layout;
}

}  // namespace

const PngStoredLayout& png_stored_layout(int64_t width, int64_t height) {
  check_size(width, height);
  static std::mutex mutex;
  static std::map<std::pair<int64_t, int64_t>, std::unique_ptr<const PngStoredLayout>> made;
  std::lock_guard<std::mutex> lock(mutex);
  auto& layout = made[{width, height}];
  if (!layout) layout = std::make_unique<const PngStoredLayout>(make_stored_layout(width, height));
  return *layout;
}

// ---- A picture in bands -------------------------------------------------------------------------

namespace {

// One zlib raw-deflate stream per thread, reset between bands, so that a band allocates nothing
// once the thread has compressed its first.
class RawDeflater {
 public:
  ~RawDeflater() {
    if (level_ >= 0) deflateEnd(&stream_);
  }
  z_stream& ready(int level) {
    if (level_ == level) {
      deflateReset(&stream_);
      return stream_;
    }
    if (level_ >= 0) deflateEnd(&stream_);
    level_ = -1;
    stream_ = z_stream{};
    // windowBits -15: raw deflate, no zlib header or trailer (the bands share one of each).
    if (deflateInit2(&stream_, level, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK) throw std::bad_alloc();
    level_ = level;
    return stream_;
  }

 private:
  z_stream stream_{};
  int level_ = -1;
};

// `filtered` as raw deflate appended to `out`, ending on a byte boundary: with a final block when
// `final`, else with an empty stored block (Z_SYNC_FLUSH) so that the next band may follow.
void deflate_band(const std::string& filtered, int level, bool final, std::string& out) {
  thread_local RawDeflater deflater;
  z_stream& stream = deflater.ready(std::min(level, 9));
  const size_t start = out.size();
  out.resize(start + deflateBound(&stream, filtered.size()) + 64);
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(filtered.data()));
  stream.avail_in = static_cast<uInt>(filtered.size());
  size_t written = start;
  for (;;) {
    stream.next_out = reinterpret_cast<Bytef*>(&out[written]);
    stream.avail_out = static_cast<uInt>(out.size() - written);
    const int result = deflate(&stream, final ? Z_FINISH : Z_SYNC_FLUSH);
    if (result != Z_OK && result != Z_STREAM_END && result != Z_BUF_ERROR) {
      throw std::logic_error("png: zlib's deflate returned " + std::to_string(result));
    }
    written = out.size() - stream.avail_out;
    const bool done = final ? result == Z_STREAM_END : stream.avail_in == 0 && stream.avail_out > 0;
    if (done) break;
    out.resize(out.size() * 2);  // past deflateBound: never expected, handled all the same
  }
  out.resize(written);
}

// A band's IDAT chunk, less its CRC (and the stream's trailer when it is the last band): length
// and type to be filled in, the zlib header for the first band, then the band's deflate bytes.
struct Band {
  std::string chunk;
  uint32_t adler = 1;      // Adler-32 of the band's filtered bytes alone
  int64_t raw_bytes = 0;   // filtered bytes
};

void compress_band(const unsigned char* rgb, int64_t width, int64_t first_row, int64_t rows, int level, bool first,
                   bool last, Band& band) {
  thread_local std::string filtered;
  filter_rows(rgb + first_row * width * 3, width, rows, filter_for(level), filtered);
  band.raw_bytes = static_cast<int64_t>(filtered.size());
  band.adler = static_cast<uint32_t>(libdeflate_adler32(1, filtered.data(), filtered.size()));
  band.chunk.assign(8, '\0');
  if (first) append_zlib_header(band.chunk, level);
  if (level == 0) {
    append_stored_blocks(filtered, last, band.chunk);
  } else {
    deflate_band(filtered, level, last, band.chunk);
  }
}

// Completes a band's chunk (the stream's trailer after the last band, its length, type and CRC)
// and hands it to `sink`. Returns its bytes.
int64_t emit_band(Band& band, bool last, uint32_t stream_adler, const PngByteSink& sink) {
  if (last) append_be32(band.chunk, stream_adler);
  unsigned char* head = reinterpret_cast<unsigned char*>(&band.chunk[0]);
  put_be32(head, static_cast<uint32_t>(band.chunk.size() - 8));
  std::memcpy(head + 4, "IDAT", 4);
  append_be32(band.chunk, chunk_crc(reinterpret_cast<const unsigned char*>(band.chunk.data()) + 4,
                                    band.chunk.size() - 4));
  sink(band.chunk.data(), static_cast<int64_t>(band.chunk.size()));
  return static_cast<int64_t>(band.chunk.size());
}

}  // namespace

int64_t png_band_rows(int64_t width) { return std::max<int64_t>(1, kBandBytes / filtered_bytes(width, 1)); }

int64_t encode_png_in_bands(const unsigned char* rgb, int64_t width, int64_t height, int level, int threads,
                            const PngByteSink& sink, int64_t band_rows) {
  check_level(level);
  check_size(width, height);
  if (band_rows <= 0) band_rows = png_band_rows(width);
  const int64_t bands = (height + band_rows - 1) / band_rows;
  const int workers = resolve_threads(threads);
  // Bands in flight: enough that a slow band does not idle the others, few enough to bound memory.
  std::vector<Band> batch(static_cast<size_t>(std::min<int64_t>(bands, 4 * int64_t{workers})));

  std::string prefix;
  append_png_prefix(width, height, prefix);
  sink(prefix.data(), static_cast<int64_t>(prefix.size()));
  int64_t bytes = static_cast<int64_t>(prefix.size());
  uint32_t stream_adler = 1;
  for (int64_t begin = 0; begin < bands; begin += static_cast<int64_t>(batch.size())) {
    const int64_t count = std::min<int64_t>(static_cast<int64_t>(batch.size()), bands - begin);
    parallel_for(count, workers, [&](int64_t from, int64_t to) {
      for (int64_t i = from; i < to; ++i) {
        const int64_t b = begin + i;
        const int64_t first_row = b * band_rows;
        compress_band(rgb, width, first_row, std::min(band_rows, height - first_row), level, b == 0, b == bands - 1,
                      batch[static_cast<size_t>(i)]);
      }
    });
    for (int64_t i = 0; i < count; ++i) {
      Band& band = batch[static_cast<size_t>(i)];
      stream_adler = static_cast<uint32_t>(adler32_combine(stream_adler, band.adler, band.raw_bytes));
      bytes += emit_band(band, begin + i == bands - 1, stream_adler, sink);
    }
  }
  std::string iend;
  append_iend(iend);
  sink(iend.data(), static_cast<int64_t>(iend.size()));
  return bytes + static_cast<int64_t>(iend.size());
}

}  // namespace facegen
