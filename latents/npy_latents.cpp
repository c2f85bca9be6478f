// npy_latents.cpp: reading (N, nz) float32 or float64 .npy files (see npy_latents.hpp).
//
// The file starts with the magic "\x93NUMPY", a version (major, minor), the header length (little-
// endian uint16 for version 1, uint32 for 2 and 3) and an ASCII (version 3: UTF-8) Python dict
// literal such as {'descr': '<f4', 'fortran_order': False, 'shape': (10, 100), }; the data follows.
#include "latents/npy_latents.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>
#include <vector>

#include "common/errors.hpp"
#include "common/model_shape.hpp"
#include "common/text_format.hpp"
#include "latents/input_file.hpp"

namespace facegen {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicBytes = 6;
constexpr size_t kMaxHeaderBytes = size_t{1} << 20;  // NumPy itself refuses headers above 10 KB
constexpr int64_t kConvertImages = 1024;              // float64 values converted per pread

// The text after `'key':` in the header dict, spaces skipped; empty when the key is missing.
std::string value_of(const std::string& header, const std::string& key) {
  const size_t at = header.find("'" + key + "'");
  if (at == std::string::npos) return "";
  size_t i = header.find(':', at);
  if (i == std::string::npos) return "";
  ++i;
  while (i < header.size() && header[i] == ' ') ++i;
  return header.substr(i);
}

class NpyLatents : public RangeLatentSource {
 public:
  NpyLatents(std::shared_ptr<const InputFile> file, int latent_dim)
      : path_(file->path()), file_(std::move(file)), latent_dim_(latent_dim) {
    file_->blame_change([&] { read_header(); });
  }
  NpyLatents(const NpyLatents&) = delete;
  NpyLatents& operator=(const NpyLatents&) = delete;

  int64_t count() const override { return count_; }
  std::string describe() const override { return path_ + " (.npy, " + (item_bytes_ == 4 ? "float32" : "float64") + ")"; }
  int64_t file_bytes() const override { return file_size_; }
  const InputFile* input_file() const override { return file_.get(); }
  void finish() override { file_->check_unchanged(); }

  void read_range(int64_t first, int64_t images, float* dst) override {
    check_range(first, images);
    file_->blame_change([&] { read_values(first, images, dst); });
    stop_for_test("latents-read");
  }

 private:
  [[noreturn]] void refuse(const std::string& what) const { throw UserError(path_ + ": " + what); }

  void read_bytes(int64_t offset, int64_t bytes, char* dst) const { file_->read_at(offset, bytes, dst); }

  void read_values(int64_t first, int64_t images, float* dst) const {
    const int64_t row = latent_dim_ * item_bytes_;
    if (item_bytes_ == 4) {
      read_bytes(data_offset_ + first * row, images * row, reinterpret_cast<char*>(dst));
      check_finite(first, images, dst, nullptr);
      return;
    }
    std::vector<double> wide(static_cast<size_t>(std::min(images, kConvertImages)) * latent_dim_);  // (chunk, nz)
    for (int64_t done = 0; done < images;) {
      const int64_t n = std::min(images - done, kConvertImages);
      read_bytes(data_offset_ + (first + done) * row, n * row, reinterpret_cast<char*>(wide.data()));
      float* out = dst + done * latent_dim_;
      for (int64_t i = 0; i < n * latent_dim_; ++i) out[i] = static_cast<float>(wide[static_cast<size_t>(i)]);
      check_finite(first + done, n, out, wide.data());
      done += n;
    }
  }

  // Values of images [first, first + images) in `values` must be finite floats; `wide` holds them as
  // read from a float64 file (to tell an infinity from a finite value too large for a float).
  void check_finite(int64_t first, int64_t images, const float* values, const double* wide) const {
    for (int64_t i = 0; i < images * latent_dim_; ++i) {
      if (std::isfinite(values[i])) continue;
      const int64_t image = first + i / latent_dim_;
      const std::string where = "image " + with_commas(image + 1) + " of " + with_commas(count_) + ", value " +
                                std::to_string(i % latent_dim_ + 1) + " of " + std::to_string(latent_dim_);
      const bool overflow = wide != nullptr && std::isfinite(wide[i]);
      refuse(where + " is " + (std::isnan(values[i]) ? "NaN" : overflow ? "too large for a float" : "infinite") +
             "; latents must be finite numbers");
    }
  }

  void read_header() {
    if (!file_->regular()) {
      refuse("a .npy latent file must be a regular file (it is read at offsets), not a pipe or a device");
    }
    file_size_ = file_->bytes();
    const std::string expected = "a .npy file starts with the magic \"\\x93NUMPY\", a version and a header";
    if (file_size_ < 10) refuse("it has " + std::to_string(file_size_) + (file_size_ == 1 ? " byte; " : " bytes; ") + expected);
    char start[12];
    read_bytes(0, std::min<int64_t>(12, file_size_), start);
    if (!has_npy_magic(std::string(start, kMagicBytes))) refuse("it is not a NumPy .npy file: " + expected);
    const int major = static_cast<unsigned char>(start[6]), minor = static_cast<unsigned char>(start[7]);
    if (major < 1 || major > 3 || minor != 0) {
      refuse("its .npy format version is " + std::to_string(major) + "." + std::to_string(minor) +
             "; versions 1.0, 2.0 and 3.0 are read");
    }
    const auto byte = [&](int i) { return static_cast<uint64_t>(static_cast<unsigned char>(start[i])); };
    const int64_t preamble = major == 1 ? 10 : 12;
    const uint64_t header_bytes = major == 1 ? byte(8) | byte(9) << 8
                                             : byte(8) | byte(9) << 8 | byte(10) << 16 | byte(11) << 24;
    if (header_bytes > kMaxHeaderBytes || preamble + static_cast<int64_t>(header_bytes) > file_size_) {
      refuse("its .npy header claims " + with_commas(static_cast<int64_t>(header_bytes)) + " bytes, but the file has " +
             with_commas(file_size_) + " bytes in all");
    }
    std::string header(header_bytes, '\0');
    read_bytes(preamble, static_cast<int64_t>(header_bytes), header.data());
    data_offset_ = preamble + static_cast<int64_t>(header_bytes);
    parse_header(header);
    const int64_t data_bytes = count_ * latent_dim_ * item_bytes_;
    if (data_offset_ + data_bytes != file_size_) {
      refuse("shape (" + with_commas(count_) + ", " + std::to_string(latent_dim_) + ") of " + (item_bytes_ == 4 ? "float32" : "float64") +
             " needs " + with_commas(data_offset_ + data_bytes) + " bytes (a " + with_commas(data_offset_) +
             "-byte header and " + with_commas(data_bytes) + " bytes of data), but the file has " +
             with_commas(file_size_) + " bytes" + (file_size_ < data_offset_ + data_bytes ? " (truncated)" : ""));
    }
  }

  void parse_header(const std::string& header) {
    std::string shown = header;
    while (!shown.empty() && (shown.back() == ' ' || shown.back() == '\n')) shown.pop_back();
    if (shown.size() > 200) shown = shown.substr(0, 200) + "...";
    const std::string descr = value_of(header, "descr");
    const std::string order = value_of(header, "fortran_order");
    const std::string shape = value_of(header, "shape");
    if (header.empty() || header[0] != '{' || descr.empty() || order.empty() || shape.empty()) {
      refuse("its .npy header is not a dict with 'descr', 'fortran_order' and 'shape': " + shown);
    }
    if (descr.compare(0, 5, "'<f4'") == 0) {
      item_bytes_ = 4;
    } else if (descr.compare(0, 5, "'<f8'") == 0) {
      item_bytes_ = 8;
    } else {
      const size_t end = descr.find_first_of(",}");
      refuse("latents in a .npy file must be float32 or float64, little-endian ('<f4' or '<f8'), but its dtype is " +
             descr.substr(0, end));
    }
    if (order.compare(0, 4, "True") == 0) {
      refuse("a .npy latent file must be in C order, but this one is in Fortran order (fortran_order: True)");
    }
    if (order.compare(0, 5, "False") != 0) refuse("its .npy header is not a dict NumPy writes: " + shown);
    const size_t close = shape.find(')');
    const std::string tuple = shape[0] == '(' && close != std::string::npos ? shape.substr(0, close + 1) : shape;
    // (N, nz), or (N, nz, 1, 1) as torch.randn(N, nz, 1, 1) saved with numpy gives: the same bytes.
    long long rows = -1;
    int columns = -1, used = 0;
    const bool flat = std::sscanf(tuple.c_str(), "(%lld, %d)%n", &rows, &columns, &used) == 2 &&
                      used == static_cast<int>(tuple.size());
    used = 0;
    const bool image_like = !flat && std::sscanf(tuple.c_str(), "(%lld, %d, 1, 1)%n", &rows, &columns, &used) == 2 &&
                            used == static_cast<int>(tuple.size());
    if ((!flat && !image_like) || columns != latent_dim_ || rows < 1) {
      refuse("a .npy latent file must have shape (N, " + std::to_string(latent_dim_) + ") or (N, " +
             std::to_string(latent_dim_) + ", 1, 1) with N >= 1, but its shape is " + tuple);
    }
    if (rows > std::numeric_limits<int64_t>::max() / (latent_dim_ * 8)) {
      refuse("its shape " + tuple + " is more than any file can hold");
    }
    count_ = rows;
  }

  std::string path_;
  std::shared_ptr<const InputFile> file_;  // the file's one descriptor
  int64_t latent_dim_;  // nz
  int64_t file_size_ = 0;
  int64_t data_offset_ = 0;
  int64_t item_bytes_ = 4;
  int64_t count_ = 0;
};

}  // namespace

bool has_npy_magic(const std::string& bytes) {
  return bytes.size() >= kMagicBytes && std::memcmp(bytes.data(), kMagic, kMagicBytes) == 0;
}

std::unique_ptr<LatentSource> open_npy_latents(std::shared_ptr<const InputFile> file, int latent_dim) {
  return std::make_unique<NpyLatents>(std::move(file), latent_dim);
}

std::unique_ptr<LatentSource> open_npy_latents(const std::string& path, int latent_dim) {
  return open_npy_latents(std::make_shared<const InputFile>(path, InputKind::Latents), latent_dim);
}

}  // namespace facegen
