// fuzz_http_request.cpp: libFuzzer target for the service's HTTP request reader (serve/http_parse.cpp,
// http_lines.cpp, chunked_body.cpp): the bytes a connection might carry, fed in pieces.
//
// Input: byte 0 picks the piece size (1 to 63 bytes, or all at once); the rest is what a client sent,
// read request after request (pipelined) until one is refused or the bytes end, then the end of input.
// Acceptable outcomes: whole requests that keep every promise (a token method, a target and a path
// that begin with '/' (or "*"), HTTP/1.0 or 1.1, a body within the limit, fields without CR, LF or
// NUL) and that use no byte twice, or a refusal with a status the reader names and a one-line
// sentence; the same outcomes whatever the piece size; every byte of the memory budget given back.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "serve/http_parse.hpp"

namespace {

using facegen::serve::HttpLimits;
using facegen::serve::HttpRequest;
using facegen::serve::MemoryBudget;
using facegen::serve::RequestReader;

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "broken promise: %s\n", what);
    std::abort();
  }
}

HttpLimits limits() {
  HttpLimits l;
  l.head.max_bytes = 2048;
  l.head.max_fields = 16;
  l.head.max_request_line = 512;
  l.max_body_bytes = 4096;
  return l;
}

void check_request(const HttpRequest& r) {
  require(!r.method.empty(), "a method");
  require(r.path == "*" || (!r.path.empty() && r.path[0] == '/'), "a path");
  require(r.version == 10 || r.version == 11, "a version");
  require(r.body.size() <= 4096, "the body limit");
  for (const auto& field : r.fields) {
    require(!field.name.empty(), "a field name");
    require(field.value.find_first_of(std::string("\r\n\0", 3)) == std::string::npos, "a field value's bytes");
  }
}

// What reading `bytes` in pieces of `piece` gives, as text to compare across piece sizes.
std::string outcomes(const std::string& bytes, size_t piece) {
  MemoryBudget budget(6000);
  std::string log;
  {
    RequestReader reader(limits(), budget);
    size_t at = 0;
    bool refused = false;
    while (at < bytes.size() && !refused) {
      const size_t end = std::min(bytes.size(), at + piece);
      while (at < end) {
        const size_t used = reader.feed(bytes.data() + at, end - at);
        require(used <= end - at, "used within the bytes given");
        at += used;
        if (reader.state() == RequestReader::State::Complete) {
          const HttpRequest request = reader.take();
          check_request(request);
          log += "request " + request.method + " " + request.target + " " + std::to_string(request.body.size()) + "\n";
        } else if (reader.state() == RequestReader::State::Refused) {
          refused = true;
          break;
        } else {
          require(at == end, "a reader wanting more takes every byte");
        }
      }
    }
    if (!refused) reader.end_of_input();
    if (reader.state() == RequestReader::State::Refused) {
      const int status = reader.refusal().status;
      const std::string& sentence = reader.refusal().sentence;
      require(status == 400 || status == 411 || status == 413 || status == 414 || status == 415 || status == 417 ||
                  status == 431 || status == 501 || status == 503 || status == 505, "a refusal's status");
      require(!sentence.empty() && sentence.find('\n') == std::string::npos, "a one-line sentence");
      log += "refused " + std::to_string(status) + "\n";
    }
  }
  require(budget.used() == 0, "every claim given back");
  return log;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t piece = data[0] % 64 == 0 ? size : data[0] % 64;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  require(outcomes(bytes, piece) == outcomes(bytes, bytes.size() + 1), "the same outcomes whatever the pieces");
  return 0;
}
