// mosaic_sink.cpp: the images as mosaics of s x s tiles of 64x64, in BMP (PREFIX.bmp, the old tools'
// format) or PNG (PREFIX.png), split into numbered files above a tile limit.
//
// One mosaic file's pixels (s*64, s*64, 3) RGB bytes, rows top to bottom, are in memory while its
// images arrive, black where no image lands; once its last image is in, stb_image_write encodes it
// (BMP: 54-byte header, rows bottom-up in BGR; PNG: zlib) through a callback into an AtomicFile, the
// pixels are freed and the file is closed; every file is renamed into place at commit(). So memory
// holds one file's pixels at most, (tiles * 64)^2 * 3 bytes, whatever N is.
//
// Why whole files and not streamed rows: BMP stores rows bottom-up while images arrive top-down, so a
// streamed BMP would need pwrite at computed offsets and a BMP header written by hand, and PNG cannot
// be streamed through stb at all. A tile limit is needed anyway (viewers, BMP's 2 GiB), and under it
// one buffer per file is the simplest bounded design that lets the library write the format.
// The callback cannot throw through the C library, so it records the first failure and the encoder
// throws it afterwards.
#include <stb_image_write.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "files/atomic_file.hpp"
#include "common/errors.hpp"
#include "files/image_sink.hpp"
#include "common/model_shape.hpp"
#include "common/text_format.hpp"

namespace facegen {
namespace {

constexpr int64_t kBmpHeaderBytes = 14 + 40;


// The mosaic side in tiles, after checking that the file fits the writer's int sizes. Rows need no
// padding: s * 64 * 3 bytes is a multiple of 4.
int64_t checked_side(const std::string& path, int64_t images) {
  if (images < 1) throw std::invalid_argument("mosaic sink: a mosaic needs at least one image");
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

struct WriteTarget {
  AtomicFile* file = nullptr;
  int64_t bytes = 0;
  bool failed = false;
  std::string error;
};

void write_to_atomic_file(void* context, void* data, int size) {
  WriteTarget* target = static_cast<WriteTarget*>(context);
  if (target->failed || size <= 0) return;
  try {
    target->file->write(data, static_cast<size_t>(size));
    target->bytes += size;
  } catch (const std::exception& e) {
    target->failed = true;
    target->error = e.what();
  }
}

const char* extension_of(MosaicEncoding encoding) { return encoding == MosaicEncoding::Bmp ? "bmp" : "png"; }

// One mosaic file: images [first, first + count) of the run, tile t = image - first.
class MosaicFile {
 public:
  MosaicFile(MosaicEncoding encoding, const std::string& path, int64_t first, int64_t count)
      : encoding_(encoding),
        first_(first),
        count_(count),
        side_(checked_side(path, count)),
        width_(side_ * kImageSize),
        file_(path),
        pixels_(static_cast<size_t>(width_ * width_ * 3), 0) {}

  int64_t first() const { return first_; }
  int64_t end() const { return first_ + count_; }

  // image: (64, 64, 3) floats of run index n, first() <= n < end().
  void place(const float* image, int64_t n) {
    constexpr int kRowValues = kImageSize * kImageChannels;
    const int64_t tile = n - first_;
    const int64_t top = tile / side_ * kImageSize;
    const int64_t left = tile % side_ * kImageSize;
    for (int y = 0; y < kImageSize; ++y) {
      unsigned char* dst = pixels_.data() + ((top + y) * width_ + left) * kImageChannels;
      const float* src = image + y * kRowValues;
      for (int k = 0; k < kRowValues; ++k) dst[k] = channel_to_byte(src[k]);
    }
  }

  // Encodes the pixels into the temporary file, then frees them and closes the file. Returns bytes.
  int64_t encode() {
    WriteTarget target;
    target.file = &file_;
    const int w = static_cast<int>(width_);
    const int ok = encoding_ == MosaicEncoding::Bmp
                       ? stbi_write_bmp_to_func(write_to_atomic_file, &target, w, w, 3, pixels_.data())
                       : stbi_write_png_to_func(write_to_atomic_file, &target, w, w, 3, pixels_.data(), w * 3);
    if (target.failed) throw UserError(target.error);
    if (ok == 0) {
      throw std::runtime_error(std::string("stb_image_write refused a ") + extension_of(encoding_) + " of " +
                               std::to_string(w) + " x " + std::to_string(w) + " pixels (out of memory?)");
    }
    file_.finish_writing();
    std::vector<unsigned char>().swap(pixels_);
    return target.bytes;
  }

  void commit() { file_.commit(); }

 private:
  MosaicEncoding encoding_;
  int64_t first_;
  int64_t count_;
  int64_t side_;   // tiles per row and per column
  int64_t width_;  // pixels per row and per column, side_ * 64
  AtomicFile file_;
  std::vector<unsigned char> pixels_;  // (width_, width_, 3) RGB, top row first
};

class MosaicSink : public ImageSink {
 public:
  MosaicSink(MosaicEncoding encoding, std::vector<std::string> paths, int64_t total_images, int64_t per_file)
      : encoding_(encoding), paths_(std::move(paths)), total_(total_images), per_file_(per_file) {
    open_file(0);  // a missing or read-only directory fails here, before any computing
  }

  void append(const float* images, int64_t first, int64_t count) override {
    if (first != written_ || count < 0 || count > total_ - written_) {
      throw std::logic_error("mosaic sink " + path() + ": got images [" + std::to_string(first) + ", " +
                             std::to_string(first + count) + ") after " + std::to_string(written_) + " of " +
                             std::to_string(total_) + "; runs must be consecutive and in order");
    }
    for (int64_t i = 0; i < count; ++i) {
      const int64_t n = first + i;
      if (n >= files_.back()->end()) open_file(static_cast<size_t>(n / per_file_));
      files_.back()->place(images + i * kImageValues, n);
      if (n + 1 == files_.back()->end()) bytes_ += files_.back()->encode();
    }
    written_ += count;
  }

  void commit() override {
    if (written_ != total_) {
      throw std::logic_error("mosaic sink " + path() + ": commit after " + std::to_string(written_) + " of " +
                             std::to_string(total_) + " images");
    }
    for (auto& file : files_) file->commit();
  }

  std::string path() const override {
    if (paths_.size() == 1) return paths_[0];
    return paths_.front() + " ... " + paths_.back() + " (" + std::to_string(paths_.size()) + " files)";
  }
  int64_t bytes_written() const override { return bytes_; }

 private:
  void open_file(size_t index) {
    const int64_t first = static_cast<int64_t>(index) * per_file_;
    files_.push_back(std::make_unique<MosaicFile>(encoding_, paths_[index], first, std::min(per_file_, total_ - first)));
  }

  MosaicEncoding encoding_;
  std::vector<std::string> paths_;
  int64_t total_;
  int64_t per_file_;  // images per file but the last
  int64_t written_ = 0;
  int64_t bytes_ = 0;
  std::vector<std::unique_ptr<MosaicFile>> files_;  // opened so far; all but the last are encoded and closed
};

}  // namespace

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

std::unique_ptr<ImageSink> make_bmp_mosaic_sink(const std::string& path, int64_t total_images) {
  return std::make_unique<MosaicSink>(MosaicEncoding::Bmp, std::vector<std::string>{path}, total_images,
                                      std::max<int64_t>(total_images, 1));
}

std::unique_ptr<ImageSink> make_mosaic_sink(MosaicEncoding encoding, const std::string& prefix, int64_t total_images,
                                             const SinkOptions& options) {
  const char* extension = extension_of(encoding);
  if (options.mosaic_tiles < 1 || options.mosaic_tiles > kMaxMosaicTiles) {
    throw UserError("--mosaic-tiles must be between 1 and " + std::to_string(kMaxMosaicTiles) +
                    " (a BMP of at most 2 GiB), got " + std::to_string(options.mosaic_tiles));
  }
  const int64_t per_file = int64_t{options.mosaic_tiles} * options.mosaic_tiles;
  std::vector<std::string> paths = mosaic_paths(prefix, extension, total_images, options.mosaic_tiles);
  if (paths.size() > 1 && options.on_notice) {
    options.on_notice(with_commas(total_images) + " images are more than one mosaic holds (" +
                      with_commas(per_file) + ", " + std::to_string(options.mosaic_tiles) + " x " +
                      std::to_string(options.mosaic_tiles) + " tiles, --mosaic-tiles): writing " +
                      std::to_string(paths.size()) + " files " + paths.front() + " ... " + paths.back());
  }
  return std::make_unique<MosaicSink>(encoding, std::move(paths), total_images, per_file);
}

}  // namespace facegen
