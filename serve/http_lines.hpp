// http_lines.hpp: the lines of a request's head (its request line and header fields) or of a chunked
// body's trailer section, read a byte at a time as they arrive, strictly as RFC 9112 (sections 2.2
// and 5) asks of a server: every line ends in CRLF (a bare LF or a bare CR is refused, not guessed
// at); no line folding (a line that begins with white space after the first); a field name is a token
// followed at once by ':'; a value holds no control character but HTAB; the white space around a
// value is not part of it. The bytes of the whole and the number of fields are bounded: past them the
// request is refused with 431 (414 where the request line alone is too long). Up to two empty lines
// before a request line are skipped, as RFC 9112 section 2.2 allows.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "serve/http_message.hpp"

namespace facegen::serve {

struct HeadLimits {
  size_t max_bytes = 16 << 10;         // the whole head (request line, fields, line ends) or trailer
  size_t max_fields = 100;             // header field lines
  size_t max_request_line = 8 << 10;   // the request line alone
};

class HeadLines {
 public:
  // `request_line`: a request's head (a request line, then fields); otherwise a trailer (fields only).
  HeadLines(const HeadLimits& limits, bool request_line) : limits_(limits), request_line_(request_line) {}

  // Reads from data[0, size) up to the empty line that ends the head, or up to the byte that makes
  // it a refusal, or up to the end of the request line (which the caller may judge at once, before
  // any more bytes: request_line_read()); returns the bytes used.
  size_t feed(const char* data, size_t size);
  bool done() const { return done_; }
  bool request_line_read() const { return have_first_line_; }
  bool begun() const { return bytes_ > 0; }
  const std::optional<HttpRefusal>& refusal() const { return refusal_; }
  const std::string& request_line() const { return first_line_; }
  std::vector<HttpField>& fields() { return fields_; }

 private:
  void refuse(int status, std::string sentence);
  void end_line();
  void field_line();

  HeadLimits limits_;
  bool request_line_;
  size_t bytes_ = 0;
  int empty_lines_before_ = 0;
  bool pending_cr_ = false;
  bool done_ = false;
  std::optional<HttpRefusal> refusal_;
  std::string line_;
  std::string first_line_;
  bool have_first_line_ = false;
  std::vector<HttpField> fields_;
};

// Whether c may appear in a token (RFC 9110 section 5.6.2): a method, a field name, a coding.
bool is_token_char(unsigned char c);

}  // namespace facegen::serve
