// npy_sink.cpp: PREFIX.npy, the images as a NumPy array, float32 (N, 64, 64, 3), C order.
//
// The .npy format (version 1.0) is a 10-byte preamble (magic "\x93NUMPY", version 1 0, a little-endian
// uint16 header length), an ASCII dict literal padded with spaces and ended by '\n' so that the data
// starts on a 64-byte boundary, then the raw little-endian data.
#include <cstring>
#include <stdexcept>
#include <string>

#include "files/atomic_file.hpp"
#include "files/image_sink.hpp"
#include "common/model_shape.hpp"

namespace facegen {
namespace {

class NpySink : public ImageSink {
 public:
  NpySink(const std::string& path, int64_t total_images) : file_(path), total_(total_images) {
    const std::string header = npy_header(total_images);
    file_.write(header.data(), header.size());
    bytes_ = static_cast<int64_t>(header.size());
  }

  void append(const float* images, int64_t first, int64_t count) override {
    if (first != written_) throw std::logic_error("npy sink: images must arrive in order");
    // (count, 64, 64, 3) float32; this program runs on little-endian machines only.
    file_.write(images, static_cast<size_t>(count) * kImageValues * sizeof(float));
    bytes_ += count * kImageValues * static_cast<int64_t>(sizeof(float));
    written_ += count;
  }

  void commit() override {
    if (written_ != total_) throw std::logic_error("npy sink: committed before every image arrived");
    file_.commit();
  }

  std::string path() const override { return file_.final_path(); }
  int64_t bytes_written() const override { return bytes_; }

 private:
  AtomicFile file_;
  int64_t total_;
  int64_t written_ = 0;
  int64_t bytes_ = 0;
};

}  // namespace

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

std::unique_ptr<ImageSink> make_npy_sink(const std::string& path, int64_t total_images) {
  return std::make_unique<NpySink>(path, total_images);
}

}  // namespace facegen
