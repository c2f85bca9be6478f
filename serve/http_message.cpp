// http_message.cpp: see http_message.hpp.
#include "serve/http_message.hpp"

#include <cstdio>
#include <ctime>

namespace facegen::serve {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "Sun, 06 Nov 1994 08:49:37 GMT" (RFC 9110's IMF-fixdate) of now, made once a second per thread.
const std::string& date_now() {
  thread_local std::time_t made_at = 0;
  thread_local std::string text;
  const std::time_t now = std::time(nullptr);
  if (now != made_at || text.empty()) {
    std::tm utc{};
    gmtime_r(&now, &utc);
    char buffer[64];
    std::strftime(buffer, sizeof buffer, "%a, %d %b %Y %H:%M:%S GMT", &utc);
    text = buffer;
    made_at = now;
  }
  return text;
}

}  // namespace

bool equal_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k) {
    char x = a[k], y = b[k];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

std::string HttpRequest::header(std::string_view name) const {
  for (const HttpField& field : fields) {
    if (equal_ignoring_case(field.name, name)) return field.value;
  }
  return "";
}

std::optional<std::string> HttpRequest::param(std::string_view name) const {
  size_t start = 0;
  while (start <= query.size()) {
    size_t end = query.find('&', start);
    if (end == std::string::npos) end = query.size();
    const std::string_view pair(query.data() + start, end - start);
    const size_t equals = pair.find('=');
    const std::string key = percent_decode(pair.substr(0, equals), true);
    if (key == name) return equals == std::string_view::npos ? "" : percent_decode(pair.substr(equals + 1), true);
    start = end + 1;
  }
  return std::nullopt;
}

int64_t HttpResponse::body_bytes() const {
  size_t bytes = body.size();
  for (const BodySlice& slice : slices) bytes += slice.size;
  return static_cast<int64_t>(bytes);
}

std::string header_text(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    const auto byte = static_cast<unsigned char>(c);
    if ((byte < 0x20 && byte != '\t') || byte >= 0x7f) c = '?';
  }
  return out;
}

std::string percent_decode(std::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (size_t k = 0; k < text.size(); ++k) {
    if (text[k] == '%' && k + 2 < text.size() && hex_value(text[k + 1]) >= 0 && hex_value(text[k + 2]) >= 0) {
      out += static_cast<char>(hex_value(text[k + 1]) * 16 + hex_value(text[k + 2]));
      k += 2;
    } else {
      out += plus_is_space && text[k] == '+' ? ' ' : text[k];
    }
  }
  return out;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

std::string response_head(const HttpResponse& response, int version, bool keep_alive) {
  std::string head;
  head.reserve(256);
  head += version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ";
  head += std::to_string(response.status);
  head += ' ';
  head += reason_phrase(response.status);
  head += "\r\nDate: ";
  head += date_now();
  if (!response.content_type.empty()) head += "\r\nContent-Type: " + response.content_type;
  // A 304 has no content, and a Content-Length there would have to be the 200's (RFC 9110 8.6).
  if (response.status != 304) head += "\r\nContent-Length: " + std::to_string(response.body_bytes());
  for (const HttpField& field : response.fields) head += "\r\n" + header_text(field.name) + ": " + header_text(field.value);
  if (!keep_alive) head += "\r\nConnection: close";
  else if (version == 10) head += "\r\nConnection: keep-alive";
  head += "\r\n\r\n";
  return head;
}

}  // namespace facegen::serve
