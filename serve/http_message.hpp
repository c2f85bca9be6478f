// http_message.hpp: an HTTP/1.1 request as the service reads it (http_parse.hpp makes it from the
// bytes of a connection) and an answer as the service writes it (the head made here, the body after
// it). No sockets here: the routes (routes.hpp) see only these two types.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "serve/memory_budget.hpp"

namespace facegen::serve {

struct HttpField {
  std::string name;   // as sent
  std::string value;  // without the white space around it
};

struct HttpRequest {
  std::string method;  // as sent; methods are case-sensitive ("get" is not GET)
  std::string target;  // as sent: "/v1/latents?seeds=1,2"
  std::string path;    // the target's path, percent-decoded: "/v1/latents"
  std::string query;   // after '?', as sent
  int version = 11;    // HTTP/1.0: 10, HTTP/1.1: 11
  bool keep_alive = true;  // HTTP/1.1 unless "Connection: close"; HTTP/1.0 only with "Connection: keep-alive"
  std::vector<HttpField> fields;
  std::string body;               // whole, de-chunked
  MemoryBudget::Claim body_claim; // the body's share of the service's budget for request bodies

  // The value of the first field named `name` (any case), or "".
  std::string header(std::string_view name) const;
  // The query parameter `name`, percent-decoded ('+' as a space); nothing when absent.
  std::optional<std::string> param(std::string_view name) const;
};

struct HttpResponse;
// Where an answer made later goes: called once, from any thread.
using HttpReply = std::function<void(HttpResponse response)>;

// Bytes of an answer's body that lie elsewhere (a batch's images in page-locked memory), written after
// `body` as they are, with no copy; HttpResponse::holds keeps them until they are written.
struct BodySlice {
  const char* data = nullptr;
  size_t size = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type;
  std::vector<HttpField> fields;  // beyond Content-Type, Content-Length, Date and Connection
  std::string body;               // the body, or its first part where `slices` follow it
  std::vector<BodySlice> slices;  // the rest of the body, in order
  std::vector<std::shared_ptr<const void>> holds;  // what keeps the slices' bytes
  bool close = false;  // the connection ends after this answer
  // Set by a handler whose answer is made later (it waits for images): the HTTP layer calls
  // later(reply) once, and reply() is called once, from any thread, with the answer (which the
  // routes have counted by then).
  std::function<void(HttpReply reply)> later;

  void set(int new_status, std::string type, std::string new_body) {
    status = new_status;
    content_type = std::move(type);
    body = std::move(new_body);
    slices.clear();
    holds.clear();
  }
  int64_t body_bytes() const;  // body and slices
};

// A request the HTTP layer refuses before any route sees it (malformed, too large, too slow): the
// status and one sentence; the connection closes after the answer.
struct HttpRefusal {
  int status = 400;
  std::string sentence;
};

// "OK", "Bad Request", ...: the reason phrase of a status the service sends.
const char* reason_phrase(int status);

// The status line and fields of `response` (Date, Content-Type, Content-Length but for a 304, its fields, and
// "Connection: close" or, to an HTTP/1.0 client, "Connection: keep-alive"), ending in the empty line.
// `keep_alive`: whether the connection stays open after it. Field names and values are written as
// header_text() leaves them, so no byte of a request can end a line or leave ASCII there.
std::string response_head(const HttpResponse& response, int version, bool keep_alive);

// `text` as a field line may hold it: printable ASCII and tabs kept, any other byte (a control
// character, CR or LF, a byte past ASCII) written as '?'.
std::string header_text(std::string_view text);

// `text` with each %XX replaced by its byte (and '+' by a space where `plus_is_space`); a '%' not
// followed by two hex digits stays as it is.
std::string percent_decode(std::string_view text, bool plus_is_space);

// Whether `a` and `b` are equal ignoring ASCII case.
bool equal_ignoring_case(std::string_view a, std::string_view b);

}  // namespace facegen::serve
