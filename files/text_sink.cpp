// text_sink.cpp: PREFIX.txt, "N\n" then one line per image: its 12,288 values (64, 64, 3), C fastest,
// each as printf("%.4f ") writes it, then "\n".
//
// printf is exact: it rounds the float's exact binary value to 4 decimals, ties to even, and keeps
// the sign of negative values that round to zero ("-0.0000"). A float is m * 2^e with m < 2^24, so for
// |v| < 2^40 the value times 10^4 is m * 10^4 * 2^e, which 64-bit integers hold exactly; rounding it
// is a shift and a comparison of the bits shifted out. Larger values, Inf and NaN go to snprintf.
//
// Formatting is the cost (about 20x cheaper than fprintf per value, see BENCHMARKS.md, and spread over
// threads); writing stays one ordered stream.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "files/atomic_file.hpp"
#include "files/image_sink.hpp"
#include "common/model_shape.hpp"
#include "common/threads.hpp"

namespace facegen {
namespace {

// Biased exponent fields up to this one mean |v| < 2^40, the range of the integer path.
constexpr uint32_t kFastMaxExponentField = 127 + 39;

// Images formatted by one thread in one go: enough to amortise the hand-over, few enough that a
// thread's buffer (kBlockImages * kMaxImageTextBytes, of which only ~100 KB per image is ever
// touched for values in (-1, 1)) stays small.
constexpr int64_t kBlockImages = 8;

// Formatting is parallel and writing is ordered: blocks of kBlockImages images are handed out from a
// counter; a thread formats its block into its own buffer, waits for the block before it to be
// written, writes its own, and takes the next. Memory: one buffer per thread, whatever N is.
class TextSink : public ImageSink {
 public:
  TextSink(const std::string& path, int64_t total_images, const SinkOptions& options)
      : file_(path), total_(total_images), threads_(resolve_threads(options.threads)) {
    if (total_images < 0) throw std::invalid_argument("text sink: negative image count");
    const std::string header = std::to_string(total_images) + "\n";
    file_.write(header.data(), header.size());
    bytes_ += static_cast<int64_t>(header.size());
  }

  void append(const float* images, int64_t first, int64_t count) override {
    if (first != written_ || count < 0 || count > total_ - written_) {
      throw std::logic_error("text sink " + file_.final_path() + ": got images [" + std::to_string(first) + ", " +
                             std::to_string(first + count) + ") after " + std::to_string(written_) + " of " +
                             std::to_string(total_) + "; runs must be consecutive and in order");
    }
    const int64_t blocks = (count + kBlockImages - 1) / kBlockImages;
    const int workers = static_cast<int>(std::min<int64_t>(threads_, blocks));
    while (static_cast<int>(buffers_.size()) < workers) {
      // new[] without initialisation: pages are touched, and counted as resident, only as text lands.
      buffers_.emplace_back(new char[kBlockImages * kMaxImageTextBytes]);
    }

    std::atomic<int64_t> next_block{0};
    std::mutex mutex;
    std::condition_variable turn;
    int64_t next_to_write = 0;
    bool failed = false;
    std::vector<std::exception_ptr> errors(static_cast<size_t>(std::max(workers, 1)));
    auto work = [&](int worker) {
      char* buffer = buffers_[static_cast<size_t>(worker)].get();
      try {
        for (int64_t block = next_block++; block < blocks; block = next_block++) {
          const int64_t begin = block * kBlockImages;
          const int64_t end = std::min(count, begin + kBlockImages);
          char* p = buffer;
          for (int64_t i = begin; i < end; ++i) p += format_image_text(images + i * kImageValues, p);
          std::unique_lock<std::mutex> lock(mutex);
          turn.wait(lock, [&] { return next_to_write == block || failed; });
          if (failed) return;
          // Writing under the lock keeps the file's order; the other threads go on formatting.
          file_.write(buffer, static_cast<size_t>(p - buffer));
          bytes_ += p - buffer;
          ++next_to_write;
          turn.notify_all();
        }
      } catch (...) {
        errors[static_cast<size_t>(worker)] = std::current_exception();
        std::lock_guard<std::mutex> lock(mutex);
        failed = true;
        turn.notify_all();
      }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < workers; ++t) pool.emplace_back(work, t);
    if (workers > 0) work(0);
    for (auto& thread : pool) thread.join();
    for (auto& error : errors)
      if (error) std::rethrow_exception(error);
    written_ += count;
  }

  void commit() override {
    if (written_ != total_) {
      throw std::logic_error("text sink " + file_.final_path() + ": commit after " + std::to_string(written_) +
                             " of " + std::to_string(total_) + " images");
    }
    file_.commit();
    buffers_.clear();
  }

  std::string path() const override { return file_.final_path(); }
  int64_t bytes_written() const override { return bytes_; }

 private:
  AtomicFile file_;
  int64_t total_;
  int threads_;
  int64_t written_ = 0;
  int64_t bytes_ = 0;
  std::vector<std::unique_ptr<char[]>> buffers_;  // one per formatting thread
};

}  // namespace

size_t format_value_text(float v, char* out) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  const uint32_t exponent_field = (bits >> 23) & 0xff;
  if (exponent_field > kFastMaxExponentField) {
    char text[64];
    const int n = std::snprintf(text, sizeof text, "%.4f ", static_cast<double>(v));
    std::memcpy(out, text, static_cast<size_t>(n));
    return static_cast<size_t>(n);
  }

  // v = (-1)^sign * mantissa * 2^exponent, exactly.
  uint64_t mantissa = bits & 0x7fffff;
  int exponent = -149;
  if (exponent_field != 0) {
    mantissa |= 0x800000;
    exponent = static_cast<int>(exponent_field) - 150;
  }
  const uint64_t scaled = mantissa * 10000;  // < 2^38
  uint64_t units;                            // round(|v| * 10^4), ties to even
  if (exponent >= 0) {
    units = scaled << exponent;  // exponent <= 16: < 2^54
  } else if (exponent > -64) {
    const int shift = -exponent;
    const uint64_t rest = scaled & ((uint64_t{1} << shift) - 1);
    const uint64_t half = uint64_t{1} << (shift - 1);
    units = scaled >> shift;
    if (rest > half || (rest == half && (units & 1))) ++units;
  } else {
    units = 0;  // |v| * 10^4 < 2^38 * 2^-64
  }

  char* p = out;
  if (bits >> 31) *p++ = '-';
  uint64_t whole = units / 10000;
  uint32_t fraction = static_cast<uint32_t>(units % 10000);
  if (whole < 10) {
    *p++ = static_cast<char>('0' + whole);
  } else {
    char digits[20];
    int n = 0;
    while (whole > 0) {
      digits[n++] = static_cast<char>('0' + whole % 10);
      whole /= 10;
    }
    while (n > 0) *p++ = digits[--n];
  }
  p[0] = '.';
  p[4] = static_cast<char>('0' + fraction % 10);
  fraction /= 10;
  p[3] = static_cast<char>('0' + fraction % 10);
  fraction /= 10;
  p[2] = static_cast<char>('0' + fraction % 10);
  p[1] = static_cast<char>('0' + fraction / 10);
  p[5] = ' ';
  return static_cast<size_t>(p + 6 - out);
}

size_t format_image_text(const float* image, char* out) {
  char* p = out;
  for (int i = 0; i < kImageValues; ++i) p += format_value_text(image[i], p);
  *p++ = '\n';
  return static_cast<size_t>(p - out);
}

std::unique_ptr<ImageSink> make_text_sink(const std::string& path, int64_t total_images,
                                          const SinkOptions& options) {
  return std::make_unique<TextSink>(path, total_images, options);
}

}  // namespace facegen
