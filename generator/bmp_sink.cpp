// bmp_sink.cpp: PREFIX.bmp, all images as one 24-bit mosaic of s x s tiles, s = ceil(sqrt(N)).
//
// The mosaic (s*64, s*64, 3) RGB bytes, rows top to bottom, stays in memory, black where no image
// lands; commit() hands it to stb_image_write, which writes the 54-byte BMP header and the rows
// bottom-up in BGR order, through a callback into an AtomicFile. The callback cannot throw through
// the C library, so it records the first failure and commit() throws it afterwards.
#include <stb_image_write.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "generator/atomic_file.hpp"
#include "generator/errors.hpp"
#include "generator/image_sink.hpp"
#include "generator/network.hpp"

namespace facegen {
namespace {

constexpr int64_t kBmpHeaderBytes = 14 + 40;

std::string with_commas(int64_t value) {
  std::string digits = std::to_string(value);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

// The mosaic side in tiles, after checking that the BMP fits the writer's int sizes. Rows need no
// padding: s * 64 * 3 bytes is a multiple of 4.
int64_t checked_side(const std::string& path, int64_t total_images) {
  if (total_images < 1) throw std::invalid_argument("bmp sink: a mosaic needs at least one image");
  const int64_t side = mosaic_side(total_images);
  const int64_t pixels = side * kImageSize;
  const int64_t bytes = pixels * pixels * 3 + kBmpHeaderBytes;
  if (bytes > std::numeric_limits<int>::max()) {
    throw UserError("cannot write " + path + ": a mosaic of " + with_commas(total_images) + " images is " +
                    with_commas(pixels) + " x " + with_commas(pixels) + " pixels, " + with_commas(bytes) +
                    " bytes, more than the BMP writer can hold (2 GiB)");
  }
  return side;
}

struct WriteTarget {
  AtomicFile* file = nullptr;
  bool failed = false;
  std::string error;
};

void write_to_atomic_file(void* context, void* data, int size) {
  WriteTarget* target = static_cast<WriteTarget*>(context);
  if (target->failed || size <= 0) return;
  try {
    target->file->write(data, static_cast<size_t>(size));
  } catch (const std::exception& e) {
    target->failed = true;
    target->error = e.what();
  }
}

class BmpMosaicSink : public ImageSink {
 public:
  BmpMosaicSink(const std::string& path, int64_t total_images)
      : side_(checked_side(path, total_images)),
        width_(side_ * kImageSize),
        total_(total_images),
        file_(path),
        mosaic_(static_cast<size_t>(width_ * width_ * 3), 0) {}

  void append(const float* images, int64_t first, int64_t count) override {
    if (first != written_ || count < 0 || count > total_ - written_) {
      throw std::logic_error("bmp sink " + file_.final_path() + ": got images [" + std::to_string(first) + ", " +
                             std::to_string(first + count) + ") after " + std::to_string(written_) + " of " +
                             std::to_string(total_) + "; runs must be consecutive and in order");
    }
    constexpr int kRowValues = kImageSize * kImageChannels;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t n = first + i;
      const float* image = images + i * kImageValues;  // (64, 64, 3)
      const int64_t top = n / side_ * kImageSize;
      const int64_t left = n % side_ * kImageSize;
      for (int y = 0; y < kImageSize; ++y) {
        unsigned char* dst = mosaic_.data() + ((top + y) * width_ + left) * kImageChannels;
        const float* src = image + y * kRowValues;
        for (int k = 0; k < kRowValues; ++k) dst[k] = channel_to_byte(src[k]);
      }
    }
    written_ += count;
  }

  void commit() override {
    if (written_ != total_) {
      throw std::logic_error("bmp sink " + file_.final_path() + ": commit after " + std::to_string(written_) +
                             " of " + std::to_string(total_) + " images");
    }
    WriteTarget target;
    target.file = &file_;
    const int w = static_cast<int>(width_);
    if (stbi_write_bmp_to_func(write_to_atomic_file, &target, w, w, 3, mosaic_.data()) == 0) {
      throw std::logic_error("stbi_write_bmp_to_func refused a " + std::to_string(w) + " x " + std::to_string(w) +
                             " image");
    }
    if (target.failed) throw UserError(target.error);
    file_.commit();
  }

  std::string path() const override { return file_.final_path(); }

 private:
  int64_t side_;   // tiles per row and per column
  int64_t width_;  // pixels per row and per column, side_ * 64
  int64_t total_;
  int64_t written_ = 0;
  AtomicFile file_;
  std::vector<unsigned char> mosaic_;  // (width_, width_, 3) RGB, top row first
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

std::unique_ptr<ImageSink> make_bmp_mosaic_sink(const std::string& path, int64_t total_images) {
  return std::make_unique<BmpMosaicSink>(path, total_images);
}

}  // namespace facegen
