// latents.hpp: reader of latent-vector files.
//
// Format: text; the first token is N (a positive integer), then N*nz floats (nz: the model's latent
// size, 100 for the SHPC network), separated by any white space. The reader streams: it holds a buffer of bounded size (1 MiB at most), never the whole file, so any N
// runs in bounded memory. Every problem is a UserError naming the file, the line and column, the
// token and what was expected: a missing or non-integer N, N <= 0, N larger than the file can hold,
// a token that is not a number, NaN or Inf, fewer or more than N*100 numbers.
//
// A reader can also start in the middle of a regular file, at the first token of any image, when the
// caller knows that token's byte offset, line and column (latent_index.hpp finds them): several
// threads or ranks then read their own images of one file with the same messages as one reader.
// Readers of one file share its one descriptor (input_file.hpp): a regular file is read at offsets,
// no further than its size at the open, a stream in order.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/model_shape.hpp"
#include "latents/input_file.hpp"

namespace facegen {

// The bytes that separate tokens (the C locale's isspace).
inline bool is_latent_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Where a reader starts in the middle of a file: the first token of image `image` of `count`,
// which lies at 1-based `line`:`column` (the stream is already positioned at its byte); each image
// has `latent_dim` values.
struct LatentResume {
  int64_t count = 0;
  int64_t image = 0;
  int64_t line = 1;
  int64_t column = 1;
  int latent_dim = kLatentDim;
};

// How a token converts to a latent value, exactly as strtof reads it: kValue (any token strtof
// consumes in full, decimal or hexadecimal, underflow kept as 0 or a subnormal), or why it is refused.
enum class LatentToken { kValue, kNotNumber, kNaN, kInfinite, kOverflow };
LatentToken parse_latent_value(const char* text, size_t length, float* value);

class LatentReader {
 public:
  // Opens the file and reads N; each image has `latent_dim` values (nz). Throws UserError.
  explicit LatentReader(const std::string& path, int latent_dim = kLatentDim);
  // Reads N from the start of a file that is already open (a regular file from byte 0, a stream from
  // where it stands); `file` stays open at least as long as the reader.
  LatentReader(std::shared_ptr<const InputFile> file, int latent_dim);
  // Reads from a stream that is already open (a pipe, fmemopen, a memfd); the reader owns it and
  // closes it, also when this throws. `name` stands for the file in messages. The N-against-size check
  // applies when the stream is a regular file. `buffer_bytes` (at least 1) is the read buffer; tests
  // make it small to cut tokens at every position.
  LatentReader(std::FILE* file, const std::string& name, size_t buffer_bytes = kDefaultBufferBytes,
               int latent_dim = kLatentDim);
  static constexpr size_t kDefaultBufferBytes = size_t{1} << 20;
  // Resumes at `at` in a stream positioned there (no header is read); finish() works too once
  // images_read() reaches count().
  LatentReader(std::FILE* file, const std::string& name, const LatentResume& at);
  // Resumes at byte `offset` of a regular file that is already open, which is `at`.
  LatentReader(std::shared_ptr<const InputFile> file, int64_t offset, const LatentResume& at);
  // The buffer starts at this size and grows (doubling) to buffer_bytes only while one token fills
  // it, so that a reader of a few images neither holds nor reads a whole buffer.
  static constexpr size_t kFirstBufferBytes = size_t{64} << 10;
  ~LatentReader();
  LatentReader(const LatentReader&) = delete;
  LatentReader& operator=(const LatentReader&) = delete;

  int64_t count() const { return count_; }    // N
  int64_t images_read() const { return read_; }
  int latent_dim() const { return latent_dim_; }  // nz

  // Reads the next min(max_images, N - images_read()) latents into dst, (max_images, nz) floats.
  // Returns how many it read. Throws UserError.
  int64_t read(float* dst, int64_t max_images);

  // Call once all N latents were read: throws UserError if any token follows them, or if the file
  // read through an InputFile changed since it was opened (a parse error says so too, instead of
  // blaming bytes that changed under it).
  void finish();

 private:
  struct Token {
    const char* text;
    size_t length;
    int64_t line;
    int64_t column;
  };
  void read_header(size_t buffer_bytes);  // N, checked against the file's size where it has one
  bool next_token(Token* token);  // false at end of file
  void refill();
  [[noreturn]] void fail_at(const Token& token, const std::string& what) const;

  std::string quote(const Token& token) const;  // the token in quotes, shortened, escaped
  std::string where(int64_t value_index) const;  // "image 3 of 10, value 15 of 100"
  std::string n_times_nz() const;                // "(N x 100)"

  std::string path_;
  std::FILE* file_ = nullptr;                 // a stream the caller gave, or
  std::shared_ptr<const InputFile> input_;    // the shared descriptor, read from input_offset_
  int64_t input_offset_ = 0;
  std::vector<char> buffer_;
  size_t capacity_ = 0;  // the most buffer_ grows to: a token this long is refused
  size_t begin_ = 0;  // next unread byte in buffer_
  size_t end_ = 0;    // one past the last valid byte
  bool eof_ = false;
  int64_t bytes_read_ = 0;   // bytes fread so far
  int64_t file_size_ = -1;   // -1 when the input is not a regular file
  int64_t line_ = 1;
  int64_t column_ = 1;
  int64_t count_ = 0;
  int64_t read_ = 0;
  int latent_dim_ = kLatentDim;
};

// Reads a whole latent file: returns (N, nz) floats. For tests and small files.
std::vector<float> read_all_latents(const std::string& path, int latent_dim = kLatentDim);

}  // namespace facegen
