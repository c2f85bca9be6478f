// http_parse.hpp: one HTTP/1.1 request read from the bytes of a connection as they arrive, with no
// socket in sight: the connection (http_connection.hpp) feeds it bytes and gets a whole request, or a
// refusal, and the bytes that follow it (the next, pipelined, request's).
//
// Framing as RFC 9112 section 6 asks of a server, with no guessing:
//   - the head read strictly (http_lines.hpp); a request line "METHOD SP TARGET SP HTTP/1.x", the
//     target a path ("/..."; an absolute "http://host/path" is read as its path); another HTTP
//     version: 505; HTTP/1.1 without Host, or two Hosts: 400. The request line is judged as soon as
//     it ends (its CRLF), so one that is not HTTP/1.x (HTTP/0.9's "GET /") is refused at once rather
//     than waited on for a head that will not come
//   - Content-Length: decimal digits only ("+34", "34a", "-1", "" refused), a list or several fields
//     only if every value is the same; with Transfer-Encoding too: 400 (the length is ambiguous)
//   - Transfer-Encoding: chunked last and once, or 400 (the length cannot be known); any other coding
//     before it: 501; in HTTP/1.0: 400; the chunks decoded strictly (chunked_body.hpp)
//   - POST, PUT and PATCH without a length: 411; a body past the limit, announced or chunked: 413
//   - Content-Encoding other than identity: 415 (the service decodes none, so none can inflate)
//   - Expect: 100-continue is honoured (wants_continue); any other expectation: 417
//   - a body claims its bytes from the service's MemoryBudget before it is read: 503 where it cannot
// A GET (or any request) with a body has the body it announces read and set aside, never read as a
// request of its own. A refused request ends its connection (HttpResponse::close).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "serve/chunked_body.hpp"
#include "serve/http_lines.hpp"
#include "serve/http_message.hpp"
#include "serve/memory_budget.hpp"

namespace facegen::serve {

struct HttpLimits {
  HeadLimits head;                        // also a chunked body's trailer
  int64_t max_body_bytes = int64_t{32} << 20;
};

class RequestReader {
 public:
  RequestReader(const HttpLimits& limits, MemoryBudget& budget);
  ~RequestReader();

  enum class State { Head, Body, Complete, Refused };

  // Reads from data[0, size) until the request is whole or refused; returns the bytes used (those
  // after them belong to the next request).
  size_t feed(const char* data, size_t size);
  // The client closed its side: a request begun and not whole is refused (400).
  void end_of_input();

  State state() const { return state_; }
  bool begun() const { return head_.begun(); }
  // Whether the head asked for "100 Continue" and it has not been sent (call continue_sent()).
  bool wants_continue() const { return state_ == State::Body && expect_continue_ && request_.body.empty(); }
  void continue_sent() { expect_continue_ = false; }
  const HttpRefusal& refusal() const { return *refusal_; }
  // The whole request (state Complete); the reader then reads the next one.
  HttpRequest take();

 private:
  void refuse(int status, std::string sentence);
  void finish_head();
  bool read_request_line();
  bool read_framing();
  size_t feed_body(const char* data, size_t size);

  HttpLimits limits_;
  MemoryBudget& budget_;
  State state_ = State::Head;
  HeadLines head_;
  HttpRequest request_;
  std::optional<HttpRefusal> refusal_;
  bool expect_continue_ = false;
  bool request_line_judged_ = false;  // the request line was read and found good
  bool chunked_ = false;
  uint64_t length_ = 0;  // Content-Length (0 without one)
  std::unique_ptr<ChunkedBody> chunks_;
};

}  // namespace facegen::serve
