// latents.cpp: streaming reader of latent files: "N" then N*100 floats, any white space between.
//
// The file is read through one buffer of 64 KiB that grows (to 1 MiB by default) only while one token
// fills it; a token cut by the end of the buffer is moved to its front before the next read, so
// memory stays bounded for any N. Positions in messages are
// 1-based line:column of a token's first byte, columns counted in bytes. A value is any token that
// strtof consumes in full (decimal or hexadecimal); one that underflows is kept as 0 or a subnormal,
// one that overflows is an error like NaN and Inf. fast_float converts the common tokens (plain
// decimals: correctly rounded, as glibc's strtof is, and about 5 times faster); any token it does not
// take in full as a finite number (a leading '+', hexadecimal, inf, nan, overflow, junk) goes to
// strtof, so what is accepted or refused, and every value, is strtof's.
#include "latents/latents.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>

#include <fast_float/fast_float.h>

#include "common/errors.hpp"
#include "common/model_shape.hpp"
#include "common/text_format.hpp"

namespace facegen {
namespace {

constexpr size_t kQuoteChars = 32;  // longer tokens are shortened in messages
constexpr int64_t kMinBytesPerValue = 2;  // one character and one separator

bool is_space(char c) { return is_latent_space(c); }

// A token as a NUL-terminated string, on the stack when short.
class TokenString {
 public:
  TokenString(const char* text, size_t length) {
    if (length < sizeof small_) {
      std::memcpy(small_, text, length);
      small_[length] = '\0';
      data_ = small_;
    } else {
      large_.assign(text, length);
      data_ = large_.c_str();
    }
  }
  const char* c_str() const { return data_; }

 private:
  char small_[64];
  std::string large_;
  const char* data_;
};

bool is_integer_text(const char* s, size_t length) {
  size_t i = (length > 0 && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
  if (i == length) return false;
  for (; i < length; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
  }
  return true;
}

}  // namespace

LatentToken parse_latent_value(const char* text, size_t length, float* value) {
  const fast_float::from_chars_result fast = fast_float::from_chars(text, text + length, *value);
  if (fast.ec == std::errc() && fast.ptr == text + length && std::isfinite(*value)) return LatentToken::kValue;
  const TokenString copy(text, length);
  char* end = nullptr;
  errno = 0;
  *value = std::strtof(copy.c_str(), &end);
  const bool range_error = errno == ERANGE;
  if (end != copy.c_str() + length) return LatentToken::kNotNumber;
  if (std::isnan(*value)) return LatentToken::kNaN;
  if (std::isinf(*value)) return range_error ? LatentToken::kOverflow : LatentToken::kInfinite;
  // A range error with a finite result is an underflow to zero or a subnormal: that value is kept.
  return LatentToken::kValue;
}

LatentReader::LatentReader(std::FILE* file, const std::string& name, const LatentResume& at)
    : path_(name), file_(file), line_(at.line), column_(at.column), count_(at.count), read_(at.image),
      latent_dim_(at.latent_dim) {
  if (file_ == nullptr) throw std::invalid_argument("LatentReader: null stream for " + name);
  if (at.count < 1 || at.image < 0 || at.image > at.count || at.latent_dim < 1) {
    std::fclose(file_);
    file_ = nullptr;
    throw std::invalid_argument("LatentReader: resuming at image " + std::to_string(at.image) + " of " +
                                std::to_string(at.count));
  }
  capacity_ = kDefaultBufferBytes;
  buffer_.resize(std::min(capacity_, kFirstBufferBytes));
}

LatentReader::LatentReader(std::shared_ptr<const InputFile> file, int64_t offset, const LatentResume& at)
    : path_(file->path()), input_(std::move(file)), input_offset_(offset), line_(at.line), column_(at.column),
      count_(at.count), read_(at.image), latent_dim_(at.latent_dim) {
  if (!input_->regular() || offset < 0 || offset > input_->bytes() || at.count < 1 || at.image < 0 ||
      at.image > at.count || at.latent_dim < 1) {
    throw std::invalid_argument("LatentReader: resuming " + path_ + " at byte " + std::to_string(offset) +
                                ", image " + std::to_string(at.image) + " of " + std::to_string(at.count));
  }
  file_size_ = input_->bytes();
  capacity_ = kDefaultBufferBytes;
  buffer_.resize(std::min(capacity_, kFirstBufferBytes));
}

LatentReader::LatentReader(const std::string& path, int latent_dim)
    : LatentReader(std::make_shared<const InputFile>(path, InputKind::Latents), latent_dim) {}

LatentReader::LatentReader(std::shared_ptr<const InputFile> file, int latent_dim)
    : path_(file->path()), input_(std::move(file)), latent_dim_(latent_dim) {
  if (input_->directory()) throw UserError("input file " + path_ + " is a directory, not a latent file");
  file_size_ = input_->bytes();
  read_header(kDefaultBufferBytes);
}

LatentReader::LatentReader(std::FILE* file, const std::string& name, size_t buffer_bytes, int latent_dim)
    : path_(name), file_(file), latent_dim_(latent_dim) {
  if (file_ == nullptr) throw std::invalid_argument("LatentReader: null stream for " + name);
  // The destructor does not run if a constructor throws, so close the stream on the way out.
  try {
    struct stat st;
    if (::fstat(::fileno(file_), &st) == 0) {
      if (S_ISDIR(st.st_mode)) throw UserError("input file " + path_ + " is a directory, not a latent file");
      if (S_ISREG(st.st_mode)) file_size_ = st.st_size;
    }
    read_header(buffer_bytes);
  } catch (...) {
    std::fclose(file_);
    file_ = nullptr;
    throw;
  }
}

void LatentReader::read_header(size_t buffer_bytes) {
  if (buffer_bytes == 0) throw std::invalid_argument("LatentReader: a read buffer of 0 bytes");
  if (latent_dim_ < 1) throw std::invalid_argument("LatentReader: latents of " + std::to_string(latent_dim_) + " values");
  capacity_ = buffer_bytes;
  buffer_.resize(std::min(capacity_, kFirstBufferBytes));
  Token token;
  if (!next_token(&token)) {
    fail_at(token, "the file is empty, but it must start with the image count N, a positive integer");
  }
  // A UTF-8 byte order mark, as some editors write, is not part of N.
  if (token.length > 3 && std::memcmp(token.text, "\xEF\xBB\xBF", 3) == 0) {
    token.text += 3;
    token.length -= 3;
  }
  const TokenString text(token.text, token.length);
  if (!is_integer_text(token.text, token.length)) {
    char* end = nullptr;
    std::strtod(text.c_str(), &end);
    const bool is_number = end == text.c_str() + token.length;
    fail_at(token, std::string("the image count N must be a positive integer, but the first token is ") +
                       (is_number ? "the non-integer " : "") + quote(token));
  }
  errno = 0;
  const long long n = std::strtoll(text.c_str(), nullptr, 10);
  const bool overflow = errno == ERANGE;
  if (n <= 0) {
    fail_at(token, "the image count N must be a positive integer, but it is " + quote(token));
  }
  // Each of the N*nz numbers needs at least one character and one separator before it.
  const int64_t after_n = bytes_read_ - static_cast<int64_t>(end_ - begin_);
  const int64_t max_n = (std::numeric_limits<int64_t>::max() - after_n) / (latent_dim_ * kMinBytesPerValue);
  if (overflow || n > max_n) {
    fail_at(token, "the image count N = " + std::string(text.c_str()) +
                       " is too large: that many images need more numbers than any file can hold");
  }
  if (file_size_ >= 0) {
    const int64_t needed = after_n + n * latent_dim_ * kMinBytesPerValue;
    if (needed > file_size_) {
      fail_at(token, "the image count N = " + with_commas(n) + " needs " + with_commas(n * latent_dim_) +
                         " numbers, at least " + with_commas(needed) + " bytes, but the file has only " +
                         with_commas(file_size_) + " bytes");
    }
  }
  count_ = n;
}

LatentReader::~LatentReader() {
  if (file_ != nullptr) std::fclose(file_);
}

void LatentReader::refill() {
  if (begin_ > 0) {
    std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (end_ == buffer_.size() && buffer_.size() < capacity_) buffer_.resize(std::min(capacity_, 2 * buffer_.size()));
  size_t got = 0;
  if (input_) {
    got = static_cast<size_t>(input_->read_some(input_offset_, static_cast<int64_t>(buffer_.size() - end_),
                                                buffer_.data() + end_));
    input_offset_ += static_cast<int64_t>(got);
  } else {
    got = std::fread(buffer_.data() + end_, 1, buffer_.size() - end_, file_);
    if (got == 0 && std::ferror(file_)) {
      const int err = errno;
      throw UserError("reading input file " + path_ + " failed: " + std::strerror(err));
    }
  }
  if (got == 0) eof_ = true;
  end_ += got;
  bytes_read_ += static_cast<int64_t>(got);
}

bool LatentReader::next_token(Token* token) {
  for (;;) {
    while (begin_ < end_ && is_space(buffer_[begin_])) {
      if (buffer_[begin_] == '\n') {
        ++line_;
        column_ = 1;
      } else {
        ++column_;
      }
      ++begin_;
    }
    if (begin_ < end_) break;
    if (eof_) {
      *token = Token{"", 0, line_, column_};
      return false;
    }
    refill();
  }

  size_t stop = begin_;
  for (;;) {
    while (stop < end_ && !is_space(buffer_[stop])) ++stop;
    if (stop < end_ || eof_) break;
    // The token runs into the end of the buffer: keep it and read on.
    const size_t length = stop - begin_;
    if (length == capacity_) {
      Token head{buffer_.data() + begin_, length, line_, column_};
      fail_at(head, "token " + quote(head) + " is longer than " + with_commas(length) +
                        " bytes; numbers must be separated by white space");
    }
    refill();
    stop = begin_ + length;
  }
  const size_t length = stop - begin_;
  *token = Token{buffer_.data() + begin_, length, line_, column_};
  column_ += static_cast<int64_t>(length);
  begin_ = stop;
  return true;
}

std::string LatentReader::quote(const Token& token) const {
  std::string out = "\"";
  const size_t shown = token.length > kQuoteChars ? kQuoteChars : token.length;
  for (size_t i = 0; i < shown; ++i) {
    const unsigned char c = static_cast<unsigned char>(token.text[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
      out += escaped;
    }
  }
  if (shown < token.length) out += "...";
  out += "\"";
  if (shown < token.length) out += " (" + with_commas(static_cast<int64_t>(token.length)) + " characters)";
  return out;
}

std::string LatentReader::where(int64_t value_index) const {
  return "image " + with_commas(value_index / latent_dim_ + 1) + " of " + with_commas(count_) + ", value " +
         std::to_string(value_index % latent_dim_ + 1) + " of " + std::to_string(latent_dim_);
}

std::string LatentReader::n_times_nz() const { return "(N x " + std::to_string(latent_dim_) + ")"; }

void LatentReader::fail_at(const Token& token, const std::string& what) const {
  // Bytes that changed under the reader are no mistake of the file as it was: say that it changed.
  if (input_) input_->check_unchanged();
  throw UserError(path_ + ":" + std::to_string(token.line) + ":" + std::to_string(token.column) + ": " + what);
}

int64_t LatentReader::read(float* dst, int64_t max_images) {
  if (max_images < 0) throw std::invalid_argument("LatentReader::read: negative max_images");
  const int64_t images = std::min(max_images, count_ - read_);
  const int64_t values = images * latent_dim_;
  const int64_t first_value = read_ * latent_dim_;
  Token token;
  for (int64_t i = 0; i < values; ++i) {
    const int64_t index = first_value + i;
    if (!next_token(&token)) {
      fail_at(token, "the file ends after " + with_commas(index) + " numbers, but N = " + with_commas(count_) +
                         " calls for " + with_commas(count_ * latent_dim_) + " " + n_times_nz());
    }
    float value = 0;
    const LatentToken kind = parse_latent_value(token.text, token.length, &value);
    if (kind == LatentToken::kNotNumber) fail_at(token, quote(token) + " (" + where(index) + ") is not a number");
    if (kind == LatentToken::kNaN) {
      fail_at(token, quote(token) + " (" + where(index) + ") is NaN; latents must be finite numbers");
    }
    if (kind != LatentToken::kValue) {
      fail_at(token, quote(token) + " (" + where(index) + ") is " +
                         (kind == LatentToken::kOverflow ? "too large for a float" : "infinite") +
                         "; latents must be finite numbers");
    }
    dst[i] = value;
  }
  read_ += images;
  return images;
}

void LatentReader::finish() {
  if (read_ != count_) {
    throw std::logic_error("LatentReader::finish called after " + std::to_string(read_) + " of " +
                           std::to_string(count_) + " images");
  }
  Token token;
  if (next_token(&token)) {
    fail_at(token, "unexpected " + quote(token) + " after the " + with_commas(count_ * latent_dim_) +
                       " numbers that N = " + with_commas(count_) + " calls for " + n_times_nz());
  }
  if (input_) input_->check_unchanged();  // after the last read: the file is still the one opened
}

std::vector<float> read_all_latents(const std::string& path, int latent_dim) {
  LatentReader reader(path, latent_dim);
  std::vector<float> latents(static_cast<size_t>(reader.count()) * latent_dim);  // (N, nz)
  reader.read(latents.data(), reader.count());
  reader.finish();
  return latents;
}

}  // namespace facegen
