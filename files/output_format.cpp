// output_format.cpp: the files of each output format and where a run of images goes in them
// (see output_format.hpp for each layout). The text lines themselves are made in text_lines.cpp.
#include "files/output_format.hpp"

#include <stb_image_write.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "common/model_shape.hpp"
#include "common/text_format.hpp"
#include "files/temp_registry.hpp"

namespace facegen {
namespace {

constexpr int64_t kBmpHeaderBytes = 14 + 40;
constexpr int64_t kTileRowBytes = kImageSize * kImageChannels;  // one pixel row of one tile: 192
constexpr int64_t kNpyImageBytes = int64_t{kImageValues} * 4;

void put_u16(std::string& out, uint32_t v) {
  out.push_back(static_cast<char>(v & 0xff));
  out.push_back(static_cast<char>((v >> 8) & 0xff));
}

void put_u32(std::string& out, uint32_t v) {
  put_u16(out, v & 0xffff);
  put_u16(out, v >> 16);
}

// The mosaic side in tiles, after checking that the file fits BMP's int sizes (the PNG mosaic keeps
// the same limit, so that both mosaics accept the same jobs).
int64_t checked_side(const std::string& path, int64_t images) {
  if (images < 1) throw std::invalid_argument("mosaic: a mosaic needs at least one image");
  const int64_t side = mosaic_side(images);
  const int64_t pixels = side * kImageSize;
  const int64_t bytes = pixels * pixels * 3 + kBmpHeaderBytes;
  if (bytes > std::numeric_limits<int>::max()) {
    throw UserError("cannot write " + path + ": a mosaic of " + with_commas(images) + " images is " +
                    with_commas(pixels) + " x " + with_commas(pixels) + " pixels, " + with_commas(bytes) +
                    " bytes, more than the BMP writer can hold (2 GiB)");
  }
  return side;
}

struct PngTarget {
  FileWriter* out = nullptr;
  size_t file = 0;
  int64_t bytes = 0;
  bool failed = false;
  std::string error;
};

// stb_image_write's callback: it cannot throw through the C library, so it records the failure.
void write_png_piece(void* context, void* data, int size) {
  PngTarget* target = static_cast<PngTarget*>(context);
  if (target->failed || size <= 0) return;
  try {
    target->out->write_at(target->file, target->bytes, data, size);
    target->bytes += size;
  } catch (const std::exception& e) {
    target->failed = true;
    target->error = e.what();
  }
}

void append_to_string(void* context, void* data, int size) {
  static_cast<std::string*>(context)->append(static_cast<const char*>(data), static_cast<size_t>(size));
}

// Writes bytes to a new file at path, every call checked. Throws UserError (disk full, ...).
void write_whole_file(const std::string& path, const std::string& shown, const std::string& bytes) {
  int fd;
  {
    TempCreation creating;  // a signal's cleanup of the temporary folder waits for the file to exist
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  }
  if (fd < 0) throw UserError("cannot create output file " + shown + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      ::close(fd);
      throw UserError("writing " + shown + " failed: " + std::strerror(err) +
                      (err == EFBIG ? " (the file size limit, ulimit -f)" : ""));
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) throw UserError("writing " + shown + " failed: " + std::strerror(errno));
}

}  // namespace

std::vector<OutputFormat> parse_formats(const std::string& list) {
  static const char kExpected[] = "expected a comma-separated list of txt, bmp, npy, png, mosaic-png";
  std::vector<OutputFormat> formats;
  std::stringstream stream(list);
  std::string name;
  while (std::getline(stream, name, ',')) {
    OutputFormat format;
    if (name == "txt" || name == "text") {
      format = OutputFormat::Text;
    } else if (name == "bmp") {
      format = OutputFormat::Bmp;
    } else if (name == "npy") {
      format = OutputFormat::Npy;
    } else if (name == "png") {
      format = OutputFormat::Png;
    } else if (name == "mosaic-png") {
      format = OutputFormat::MosaicPng;
    } else {
      throw UserError("unknown output format '" + name + "' in --formats '" + list + "' (" + kExpected + ")");
    }
    if (std::find(formats.begin(), formats.end(), format) == formats.end()) formats.push_back(format);
  }
  if (formats.empty()) throw UserError(std::string("--formats is empty (") + kExpected + ")");
  return formats;
}

const char* format_name(OutputFormat format) {
  switch (format) {
    case OutputFormat::Text: return "txt";
    case OutputFormat::Bmp: return "bmp";
    case OutputFormat::Npy: return "npy";
    case OutputFormat::Png: return "png";
    case OutputFormat::MosaicPng: return "mosaic-png";
  }
  return "?";
}

OutputLayout::OutputLayout(OutputFormat format, const std::string& prefix, int64_t total_images,
                           const OutputOptions& options)
    : format_(format), prefix_(prefix), total_(total_images) {
  if (total_images < 0) throw std::invalid_argument("output: negative image count");
  using Kind = OutputFile::Kind;
  switch (format) {
    case OutputFormat::Text:
      files_.push_back({Kind::Data, prefix + ".txt", std::to_string(total_images) + "\n", -1, 0, total_images, 0});
      return;
    case OutputFormat::Npy: {
      std::string header = npy_header(total_images);
      const int64_t size = static_cast<int64_t>(header.size()) + total_images * kNpyImageBytes;
      files_.push_back({Kind::Data, prefix + ".npy", std::move(header), size, 0, total_images, 0, kNpyImageBytes});
      return;
    }
    case OutputFormat::Png:
      files_.push_back({Kind::Folder, prefix, "", -1, 0, total_images, 0});
      return;
    case OutputFormat::Bmp:
    case OutputFormat::MosaicPng:
      break;
  }
  // The mosaics. mosaic_tiles 0: one file, however large.
  const int tiles = options.mosaic_tiles;
  if (tiles != 0 && (tiles < 1 || tiles > kMaxMosaicTiles)) {
    throw UserError("--mosaic-tiles must be between 1 and " + std::to_string(kMaxMosaicTiles) +
                    " (a BMP of at most 2 GiB), got " + std::to_string(tiles));
  }
  const bool bmp = format == OutputFormat::Bmp;
  const char* extension = bmp ? "bmp" : "png";
  per_file_ = tiles == 0 ? std::max<int64_t>(total_images, 1) : int64_t{tiles} * tiles;
  const std::vector<std::string> paths =
      tiles == 0 ? std::vector<std::string>{prefix + "." + extension} : mosaic_paths(prefix, extension, total_images, tiles);
  for (size_t k = 0; k < paths.size(); ++k) {
    const int64_t first = static_cast<int64_t>(k) * per_file_;
    const int64_t count = std::min(per_file_, total_images - first);
    const int64_t side = checked_side(paths[k], count);
    const int64_t pixel_bytes = side * kImageSize * side * kImageSize * 3;
    if (bmp) {
      files_.push_back(
          {Kind::Data, paths[k], bmp_header(side), kBmpHeaderBytes + pixel_bytes, first, count, side, kImageValues});
    } else {
      files_.push_back({Kind::Pixels, paths[k], "", pixel_bytes, first, count, side, kImageValues});
      files_.push_back({Kind::Encoded, paths[k], "", -1, first, count, side});
    }
  }
  if (paths.size() > 1 && options.on_notice) {
    options.on_notice(with_commas(total_images) + " images are more than one mosaic holds (" +
                      with_commas(per_file_) + ", " + std::to_string(tiles) + " x " + std::to_string(tiles) +
                      " tiles, --mosaic-tiles): writing " + std::to_string(paths.size()) + " files " +
                      paths.front() + " ... " + paths.back());
  }
}

std::string OutputLayout::describe() const {
  if (format_ == OutputFormat::Png) return files_[0].path + "/";
  const std::string& first = files_.front().path;
  const std::string& last = files_.back().path;
  const size_t count = format_ == OutputFormat::MosaicPng ? files_.size() / 2 : files_.size();
  if (count == 1) return first;
  return first + " ... " + last + " (" + std::to_string(count) + " files)";
}

int64_t OutputLayout::known_bytes() const {
  if (format_ != OutputFormat::Bmp && format_ != OutputFormat::Npy) return -1;
  int64_t bytes = 0;
  for (const OutputFile& file : files_) bytes += file.size;
  return bytes;
}

void OutputLayout::write_run(const float* images, int64_t first, int64_t count, FileWriter& out) const {
  if (first < 0 || count < 0 || count > total_ - first) {
    throw std::logic_error("output " + describe() + ": images [" + std::to_string(first) + ", " +
                           std::to_string(first + count) + ") of " + std::to_string(total_));
  }
  if (count == 0) return;
  switch (format_) {
    case OutputFormat::Npy:
      // (count, 64, 64, 3) float32, little-endian like the machines this runs on.
      out.write_at(0, static_cast<int64_t>(files_[0].header.size()) + first * kNpyImageBytes, images,
                   count * kNpyImageBytes);
      return;
    case OutputFormat::Bmp: write_mosaic_run(images, first, count, out, true); return;
    case OutputFormat::MosaicPng: write_mosaic_run(images, first, count, out, false); return;
    case OutputFormat::Png: write_png_files(images, first, count, out); return;
    case OutputFormat::Text: break;
  }
  throw std::logic_error("OutputLayout::write_run: text goes through write_text_run");
}

// A run's images land in parts of tile rows; each part is 64 pixel rows of (tiles * 192) bytes,
// gathered in file order in a buffer of the thread's own and written with one call per pixel row, or
// one call when the part spans the whole mosaic width.
void OutputLayout::write_mosaic_run(const float* images, int64_t first, int64_t count, FileWriter& out,
                                    bool bmp) const {
  thread_local std::vector<unsigned char> part;
  const size_t step = bmp ? 1 : 2;  // a mosaic PNG's files come in pairs: pixels, then the PNG
  for (size_t f = 0; f < files_.size(); f += step) {
    const OutputFile& mosaic = files_[f];
    const int64_t begin = std::max(first, mosaic.first);
    const int64_t end = std::min(first + count, mosaic.first + mosaic.count);
    const int64_t side = mosaic.side;
    const int64_t width_bytes = side * kTileRowBytes;  // one pixel row of the whole mosaic
    const int64_t height = side * kImageSize;
    const int64_t header = static_cast<int64_t>(mosaic.header.size());
    for (int64_t n = begin; n < end;) {
      const int64_t tile = n - mosaic.first;  // the file's own numbering
      const int64_t tile_row = tile / side;
      const int64_t col = tile % side;
      const int64_t tiles = std::min(end - n, side - col);
      const int64_t span = tiles * kTileRowBytes;
      part.resize(static_cast<size_t>(span * kImageSize));
      for (int y = 0; y < kImageSize; ++y) {
        // BMP rows are bottom-up: the tile's last pixel row comes first.
        unsigned char* row = part.data() + (bmp ? kImageSize - 1 - y : y) * span;
        for (int64_t t = 0; t < tiles; ++t) {
          const float* src = images + (n - first + t) * kImageValues + y * kTileRowBytes;
          unsigned char* dst = row + t * kTileRowBytes;
          if (bmp) {
            for (int x = 0; x < kImageSize; ++x) {  // RGB in, BGR out
              dst[3 * x + 0] = channel_to_byte(src[3 * x + 2]);
              dst[3 * x + 1] = channel_to_byte(src[3 * x + 1]);
              dst[3 * x + 2] = channel_to_byte(src[3 * x + 0]);
            }
          } else {
            for (int k = 0; k < kTileRowBytes; ++k) dst[k] = channel_to_byte(src[k]);
          }
        }
      }
      // The part's first row in the file: BMP's is the tile row's bottom pixel row.
      const int64_t top_row = tile_row * kImageSize;
      const int64_t file_row = bmp ? height - 1 - (top_row + kImageSize - 1) : top_row;
      const int64_t offset = header + file_row * width_bytes + col * kTileRowBytes;
      if (span == width_bytes) {
        out.write_at(f, offset, part.data(), span * kImageSize);
      } else {
        for (int r = 0; r < kImageSize; ++r) out.write_at(f, offset + r * width_bytes, part.data() + r * span, span);
      }
      n += tiles;
    }
  }
}

void OutputLayout::write_png_files(const float* images, int64_t first, int64_t count, FileWriter& out) const {
  thread_local std::vector<unsigned char> pixels;  // (64, 64, 3) RGB
  thread_local std::string png;
  pixels.resize(kImageValues);
  for (int64_t i = 0; i < count; ++i) {
    const float* image = images + i * kImageValues;
    for (int k = 0; k < kImageValues; ++k) pixels[static_cast<size_t>(k)] = channel_to_byte(image[k]);
    png.clear();
    if (stbi_write_png_to_func(append_to_string, &png, kImageSize, kImageSize, 3, pixels.data(), kImageSize * 3) == 0) {
      throw std::runtime_error("stb_image_write could not encode a 64 x 64 PNG (out of memory?)");
    }
    const std::string name = png_file_name(first + i, total_);
    write_whole_file(out.temp_path(0) + "/" + name, files_[0].path + "/" + name, png);
    out.add_bytes(0, static_cast<int64_t>(png.size()));
  }
}

int64_t OutputLayout::encode_png(size_t pixels, FileWriter& out) const {
  const OutputFile& file = files_.at(pixels);
  if (file.kind != OutputFile::Kind::Pixels) throw std::logic_error("encode_png of a file that holds no pixels");
  const std::string& path = out.temp_path(pixels);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw UserError("cannot read back the pixels of " + file.path + ": " + std::strerror(errno));
  void* map = ::mmap(nullptr, static_cast<size_t>(file.size), PROT_READ, MAP_SHARED, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  if (map == MAP_FAILED) throw UserError("cannot read back the pixels of " + file.path + ": " + std::strerror(map_errno));
  PngTarget target;
  target.out = &out;
  target.file = pixels + 1;
  const int w = static_cast<int>(file.side * kImageSize);
  const int ok = stbi_write_png_to_func(write_png_piece, &target, w, w, 3, map, w * 3);
  ::munmap(map, static_cast<size_t>(file.size));
  if (target.failed) throw UserError(target.error);
  if (ok == 0) {
    throw std::runtime_error("stb_image_write refused a png of " + std::to_string(w) + " x " + std::to_string(w) +
                             " pixels (out of memory?)");
  }
  out.file_complete(pixels + 1);
  return target.bytes;
}

std::string npy_header(int64_t total_images) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(total_images) +
                     ", 64, 64, 3), }";
  const size_t preamble = 10;
  const size_t header = dict.size() + 1;  // + '\n'
  const size_t padded = (preamble + header + 63) / 64 * 64 - preamble;
  dict.append(padded - header, ' ');
  dict.push_back('\n');
  std::string out = "\x93NUMPY";
  out.push_back(1);  // version 1.0
  out.push_back(0);
  out.push_back(static_cast<char>(padded & 0xff));  // header length, little-endian uint16
  out.push_back(static_cast<char>(padded >> 8));
  return out + dict;
}

std::string bmp_header(int64_t side) {
  const int64_t width = side * kImageSize;
  const int64_t pixel_bytes = width * width * 3;
  // BITMAPFILEHEADER + BITMAPINFOHEADER as stb_image_write fills them for 24-bit pictures: a
  // positive height (rows bottom-up), no compression, image size and resolution left 0.
  std::string header = "BM";
  put_u32(header, static_cast<uint32_t>(kBmpHeaderBytes + pixel_bytes));
  put_u16(header, 0);
  put_u16(header, 0);
  put_u32(header, kBmpHeaderBytes);
  put_u32(header, 40);
  put_u32(header, static_cast<uint32_t>(width));
  put_u32(header, static_cast<uint32_t>(width));
  put_u16(header, 1);   // planes
  put_u16(header, 24);  // bits per pixel
  for (int i = 0; i < 6; ++i) put_u32(header, 0);
  return header;
}

unsigned char channel_to_byte(float v) {
  const float scaled = (v + 1.0f) / 2.0f * 255.0f;
  if (!(scaled > 0.0f)) return 0;  // NaN too
  if (scaled >= 255.0f) return 255;
  return static_cast<unsigned char>(scaled);  // truncates toward zero
}

int64_t mosaic_side(int64_t n) {
  if (n < 0) throw std::invalid_argument("mosaic_side of a negative count");
  // The double square root is within one of the true root; fix it with exact integer squares.
  uint64_t root = static_cast<uint64_t>(std::sqrt(static_cast<double>(n)));
  const uint64_t target = static_cast<uint64_t>(n);
  while (root > 0 && root * root > target) --root;
  while ((root + 1) * (root + 1) <= target) ++root;
  return static_cast<int64_t>(root * root == target ? root : root + 1);
}

std::vector<std::string> mosaic_paths(const std::string& prefix, const char* extension, int64_t total_images,
                                      int mosaic_tiles) {
  const int64_t per_file = int64_t{mosaic_tiles} * mosaic_tiles;
  if (total_images <= per_file) return {prefix + "." + extension};
  const int64_t files = (total_images + per_file - 1) / per_file;
  std::vector<std::string> paths;
  for (int64_t k = 1; k <= files; ++k) {
    char number[32];
    std::snprintf(number, sizeof number, "-%04lld.", static_cast<long long>(k));
    paths.push_back(prefix + number + extension);
  }
  return paths;
}

std::string png_file_name(int64_t index, int64_t total_images) {
  int digits = 6;
  for (int64_t limit = 1000000; limit < total_images; limit *= 10) ++digits;
  char name[40];
  std::snprintf(name, sizeof name, "%0*lld.png", digits, static_cast<long long>(index));
  return name;
}

}  // namespace facegen
