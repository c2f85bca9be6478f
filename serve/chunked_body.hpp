// chunked_body.hpp: a request body in the chunked transfer coding (RFC 9112 section 7.1), decoded
// strictly as its bytes arrive:
//   chunk      = chunk-size [ chunk-ext ] CRLF chunk-data CRLF      (chunk-size: 1*HEXDIG)
//   last-chunk = 1*"0" [ chunk-ext ] CRLF, then trailer field lines (read as a head's, http_lines.hpp)
//                and an empty line
// A size that is not hex digits (a sign, "0x", a letter past f), that does not fit in 64 bits, a bare
// LF or CR, chunk data longer than its size, a chunk-size line past 4 KiB: refused with 400. The sum
// of the sizes past the body limit: 413, refused when the size is read, before its data. Every chunk
// claims its size from the caller (a MemoryBudget) before it is read: refused with 503 when it cannot.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "serve/http_lines.hpp"
#include "serve/http_message.hpp"

namespace facegen::serve {

class ChunkedBody {
 public:
  // `claim(bytes)`: false where those bytes cannot be held now (the request gets 503).
  ChunkedBody(int64_t max_body, const HeadLimits& trailer_limits, std::function<bool(int64_t)> claim)
      : max_body_(max_body), trailer_(trailer_limits, false), claim_(std::move(claim)) {}

  // Appends the data of the chunks in data[0, size) to `body`; returns the bytes used (the rest is
  // the next request's). Stops at the end of the trailer or at a refusal.
  size_t feed(const char* data, size_t size, std::string& body);
  bool done() const { return state_ == State::Done; }
  const std::optional<HttpRefusal>& refusal() const { return refusal_; }

 private:
  enum class State { Size, SizeSpace, Extension, SizeLf, Data, DataCr, DataLf, Trailer, Done };
  void refuse(int status, std::string sentence);
  void size_char(char c);
  void end_of_size_line();

  int64_t max_body_;
  HeadLines trailer_;
  std::function<bool(int64_t)> claim_;
  State state_ = State::Size;
  std::optional<HttpRefusal> refusal_;
  uint64_t size_ = 0;        // the chunk's size as read so far
  int size_digits_ = 0;      // its hex digits, leading zeros left out
  bool any_digit_ = false;
  size_t line_bytes_ = 0;    // of the chunk-size line
  uint64_t left_ = 0;        // chunk data still to come
  uint64_t total_ = 0;       // the sizes of the chunks so far
};

}  // namespace facegen::serve
