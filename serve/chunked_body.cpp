// chunked_body.cpp: see chunked_body.hpp.
#include "serve/chunked_body.hpp"

#include <algorithm>

#include "serve/json.hpp"

namespace facegen::serve {
namespace {

constexpr size_t kMaxChunkLine = 4096;

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

void ChunkedBody::refuse(int status, std::string sentence) {
  if (!refusal_) refusal_ = HttpRefusal{status, std::move(sentence)};
}

// A character of the chunk-size line before its extension: a hex digit, white space or ';' that
// ends the size, or the CR that ends the line.
void ChunkedBody::size_char(char c) {
  const int digit = hex_digit(c);
  if (digit >= 0 && state_ == State::Size) {
    any_digit_ = true;
    if (size_digits_ > 0 || digit > 0) ++size_digits_;
    if (size_digits_ > 16) {
      refuse(400, "a chunk size has more hex digits than a 64-bit number holds");
      return;
    }
    size_ = size_ * 16 + static_cast<uint64_t>(digit);
    return;
  }
  if (!any_digit_) {
    refuse(400, "a chunk size must be hex digits, got '" + json::printable(std::string(1, c)) +
                    "' first (a sign, a 0x or white space is not part of it)");
    return;
  }
  if (c == '\r') {
    state_ = State::SizeLf;
  } else if (c == ';') {
    state_ = State::Extension;
  } else if (c == ' ' || c == '\t') {
    state_ = State::SizeSpace;
  } else {
    refuse(400, "a chunk size must be hex digits, got '" + json::printable(std::string(1, c)) + "' after them");
  }
}

void ChunkedBody::end_of_size_line() {
  line_bytes_ = 0;
  any_digit_ = false;
  size_digits_ = 0;
  if (size_ == 0) {
    state_ = State::Trailer;
    return;
  }
  if (size_ > static_cast<uint64_t>(max_body_) - total_) {
    refuse(413, "the chunked body is larger than the " + std::to_string(max_body_ >> 20) + " MiB the service reads");
    return;
  }
  if (!claim_(static_cast<int64_t>(size_))) {
    refuse(503, "the service holds as many request bodies as it may at once; retry shortly");
    return;
  }
  left_ = size_;
  total_ += size_;
  size_ = 0;
  state_ = State::Data;
}

size_t ChunkedBody::feed(const char* data, size_t size, std::string& body) {
  size_t used = 0;
  while (used < size && !refusal_ && state_ != State::Done) {
    if (state_ == State::Data) {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(left_, size - used));
      body.append(data + used, take);
      used += take;
      left_ -= take;
      if (left_ == 0) state_ = State::DataCr;
      continue;
    }
    if (state_ == State::Trailer) {
      used += trailer_.feed(data + used, size - used);
      if (trailer_.refusal()) refusal_ = trailer_.refusal();
      if (trailer_.done()) state_ = State::Done;
      continue;
    }
    const char c = data[used++];
    switch (state_) {
      case State::Size:
      case State::SizeSpace:
      case State::Extension:
        if (++line_bytes_ > kMaxChunkLine) {
          refuse(400, "a chunk-size line is longer than " + std::to_string(kMaxChunkLine) + " bytes");
        } else if (c == '\n') {
          refuse(400, "a chunk-size line ends in a bare LF; lines end in CRLF");
        } else if (state_ == State::Size) {
          size_char(c);
        } else if (state_ == State::SizeSpace && c != ' ' && c != '\t' && c != ';' && c != '\r') {
          refuse(400, "a chunk size is followed by '" + json::printable(std::string(1, c)) + "'; only an extension (';') may follow it");
        } else if (state_ == State::SizeSpace && c == ';') {
          state_ = State::Extension;
        } else if (c == '\r') {
          state_ = State::SizeLf;
        } else if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f) {
          refuse(400, "a chunk extension holds a control character");
        }
        break;
      case State::SizeLf:
        if (c != '\n') refuse(400, "a chunk-size line holds a CR that is not followed by LF");
        else end_of_size_line();
        break;
      case State::DataCr:
        if (c != '\r') refuse(400, "a chunk's data is longer than its size (no CRLF after it)");
        else state_ = State::DataLf;
        break;
      case State::DataLf:
        if (c != '\n') refuse(400, "a chunk's data is followed by a CR without LF");
        else state_ = State::Size;
        break;
      default:
        break;
    }
  }
  return used;
}

}  // namespace facegen::serve
