// http_lines.cpp: see http_lines.hpp.
#include "serve/http_lines.hpp"

#include <cstring>

#include "serve/json.hpp"

namespace facegen::serve {

bool is_token_char(unsigned char c) {
  if (c >= '0' && c <= '9') return true;
  if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return true;
  return c != 0 && std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

void HeadLines::refuse(int status, std::string sentence) {
  if (!refusal_) refusal_ = HttpRefusal{status, std::move(sentence)};
}

size_t HeadLines::feed(const char* data, size_t size) {
  size_t used = 0;
  while (used < size && !done_ && !refusal_) {
    const char c = data[used++];
    ++bytes_;
    if (pending_cr_) {
      pending_cr_ = false;
      if (c != '\n') {
        refuse(400, "a line of the request's head holds a CR that is not followed by LF; lines end in CRLF");
        break;
      }
      const bool first = request_line_ && !have_first_line_;
      end_line();
      if (first && have_first_line_) break;  // the request line is whole: the caller judges it first
      continue;
    }
    if (c == '\r') {
      pending_cr_ = true;
    } else if (c == '\n') {
      refuse(400, "a line of the request's head ends in a bare LF; lines end in CRLF");
    } else {
      line_ += c;
    }
    if (request_line_ && !have_first_line_ && line_.size() > limits_.max_request_line) {
      refuse(414, "the request line is longer than the " + std::to_string(limits_.max_request_line) + " bytes the service reads");
    } else if (bytes_ > limits_.max_bytes) {
      refuse(431, std::string(request_line_ ? "the request's head" : "the chunked body's trailer") + " is longer than the " +
                      std::to_string(limits_.max_bytes) + " bytes the service reads");
    }
  }
  return used;
}

void HeadLines::end_line() {
  if (line_.empty()) {
    if (request_line_ && !have_first_line_ && empty_lines_before_ < 2) {
      ++empty_lines_before_;  // RFC 9112 section 2.2: empty lines before a request line may be skipped
    } else if (request_line_ && !have_first_line_) {
      refuse(400, "the request begins with more than two empty lines");
    } else {
      done_ = true;
    }
    return;
  }
  if (request_line_ && !have_first_line_) {
    first_line_ = std::move(line_);
    have_first_line_ = true;
  } else {
    field_line();
  }
  line_.clear();
}

// name ":" OWS value OWS
void HeadLines::field_line() {
  if (line_[0] == ' ' || line_[0] == '\t') {
    refuse(400, "a header line begins with white space (obsolete line folding, RFC 9112 section 5.2); send each field on one line");
    return;
  }
  const size_t colon = line_.find(':');
  if (colon == std::string::npos) {
    refuse(400, "the header line '" + json::printable(line_) + "' has no ':'");
    return;
  }
  for (size_t k = 0; k < colon; ++k) {
    if (!is_token_char(static_cast<unsigned char>(line_[k]))) {
      refuse(400, "the header field name '" + json::printable(line_.substr(0, colon)) +
                      "' is not a token (no white space is allowed before its ':')");
      return;
    }
  }
  if (colon == 0) {
    refuse(400, "a header line has an empty field name");
    return;
  }
  size_t first = colon + 1, last = line_.size();
  while (first < last && (line_[first] == ' ' || line_[first] == '\t')) ++first;
  while (last > first && (line_[last - 1] == ' ' || line_[last - 1] == '\t')) --last;
  for (size_t k = first; k < last; ++k) {
    const unsigned char c = static_cast<unsigned char>(line_[k]);
    if ((c < 0x20 && c != '\t') || c == 0x7f) {
      refuse(400, "the value of header field '" + json::printable(line_.substr(0, colon)) + "' holds a control character");
      return;
    }
  }
  if (fields_.size() >= limits_.max_fields) {
    refuse(431, "the request has more than the " + std::to_string(limits_.max_fields) + " header fields the service reads");
    return;
  }
  fields_.push_back({line_.substr(0, colon), line_.substr(first, last - first)});
}

}  // namespace facegen::serve
