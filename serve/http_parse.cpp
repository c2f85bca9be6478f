// http_parse.cpp: see http_parse.hpp. The head's lines come from HeadLines; here the request line,
// the fields that frame the body (Host, Content-Length, Transfer-Encoding, Content-Encoding, Expect,
// Connection) and the body itself.
#include "serve/http_parse.hpp"

#include <algorithm>
#include <cctype>
#include <vector>

#include "serve/json.hpp"

namespace facegen::serve {
namespace {

std::string lowercase(std::string text) {
  for (char& c : text) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return text;
}

// The elements of a comma-separated list field (RFC 9110 section 5.6.1), each without the white
// space around it; empty elements kept (as ""), for the fields that must not have them.
std::vector<std::string> list_elements(const std::string& value) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t end = value.find(',', start);
    if (end == std::string::npos) end = value.size();
    size_t first = start, last = end;
    while (first < last && (value[first] == ' ' || value[first] == '\t')) ++first;
    while (last > first && (value[last - 1] == ' ' || value[last - 1] == '\t')) --last;
    out.push_back(value.substr(first, last - first));
    if (end == value.size()) return out;
    start = end + 1;
  }
}

bool all_digits(const std::string& text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool is_body_method(const std::string& method) { return method == "POST" || method == "PUT" || method == "PATCH"; }

// What the framing fields of a head say, before they are judged.
struct Framing {
  int hosts = 0;
  bool has_length = false, has_coding = false;
  std::vector<std::string> lengths;   // each Content-Length element
  std::vector<std::string> codings;   // each Transfer-Encoding element, lower case, empty ones left out
  std::vector<std::string> content_codings;
  std::vector<std::string> connection;
  std::string expect;
};

Framing framing_of(const std::vector<HttpField>& fields) {
  Framing f;
  for (const HttpField& field : fields) {
    const std::string name = lowercase(field.name);
    if (name == "host") {
      ++f.hosts;
    } else if (name == "content-length") {
      f.has_length = true;
      for (std::string& e : list_elements(field.value)) f.lengths.push_back(std::move(e));
    } else if (name == "transfer-encoding") {
      f.has_coding = true;
      for (const std::string& e : list_elements(field.value)) {
        if (!e.empty()) f.codings.push_back(lowercase(e));
      }
    } else if (name == "content-encoding") {
      for (const std::string& e : list_elements(field.value)) {
        if (!e.empty()) f.content_codings.push_back(lowercase(e));
      }
    } else if (name == "connection") {
      for (const std::string& e : list_elements(field.value)) f.connection.push_back(lowercase(e));
    } else if (name == "expect") {
      f.expect = f.expect.empty() ? lowercase(field.value) : f.expect + "," + lowercase(field.value);
    }
  }
  return f;
}

// Content-Length's value, saturating: a number past 18 digits is larger than any limit.
uint64_t length_value(const std::string& digits) {
  const size_t significant = digits.size() - std::min(digits.find_first_not_of('0'), digits.size());
  return significant > 18 ? UINT64_MAX : significant == 0 ? 0 : std::stoull(digits);
}

// The body's framing from Content-Length and Transfer-Encoding, or why it cannot be known.
std::optional<HttpRefusal> body_framing(const Framing& f, bool http11, bool& chunked, uint64_t& length) {
  if (f.has_length && f.has_coding) {
    return HttpRefusal{400, "the request has both Content-Length and Transfer-Encoding; its length is ambiguous"};
  }
  if (f.has_coding) {
    if (!http11) return HttpRefusal{400, "Transfer-Encoding is not part of HTTP/1.0; the body's length cannot be known"};
    const auto chunks = std::count(f.codings.begin(), f.codings.end(), "chunked");
    if (f.codings.empty() || chunks != 1 || f.codings.back() != "chunked") {
      return HttpRefusal{400, "chunked must be the last Transfer-Encoding, applied once; otherwise the body's length cannot be known"};
    }
    if (f.codings.size() > 1) {
      return HttpRefusal{501, "the service decodes no transfer coding but chunked (got '" + json::printable(f.codings.front()) + "')"};
    }
    chunked = true;
  }
  for (const std::string& text : f.lengths) {
    if (!all_digits(text)) return HttpRefusal{400, "Content-Length must be a decimal number, got '" + json::printable(text) + "'"};
    if (length_value(text) != length_value(f.lengths.front())) {
      return HttpRefusal{400, "the request has two different Content-Lengths ('" + json::printable(f.lengths.front()) + "' and '" +
                                  json::printable(text) + "'); its length is ambiguous"};
    }
  }
  length = f.has_length ? length_value(f.lengths.front()) : 0;
  return std::nullopt;
}

// Host, Content-Encoding and Expect: what the service can meet.
std::optional<HttpRefusal> other_fields(const Framing& f, bool http11) {
  if (f.hosts > 1) return HttpRefusal{400, "the request names its Host more than once"};
  if (http11 && f.hosts == 0) return HttpRefusal{400, "an HTTP/1.1 request must name its Host"};
  for (const std::string& coding : f.content_codings) {
    if (coding != "identity") {
      return HttpRefusal{415, "the service reads bodies without a Content-Encoding (got '" + json::printable(coding) +
                                  "'); send the body as it is"};
    }
  }
  if (!f.expect.empty() && f.expect != "100-continue") {
    return HttpRefusal{417, "the service meets no expectation but 100-continue (got '" + json::printable(f.expect) + "')"};
  }
  return std::nullopt;
}


}  // namespace

RequestReader::RequestReader(const HttpLimits& limits, MemoryBudget& budget)
    : limits_(limits), budget_(budget), head_(limits.head, true) {}

RequestReader::~RequestReader() = default;

void RequestReader::refuse(int status, std::string sentence) {
  if (!refusal_) refusal_ = HttpRefusal{status, std::move(sentence)};
  state_ = State::Refused;
}

size_t RequestReader::feed(const char* data, size_t size) {
  size_t used = 0;
  while (state_ == State::Head) {
    used += head_.feed(data + used, size - used);  // to the head's end, a refusal, or the request line's end
    if (head_.refusal()) {
      refuse(head_.refusal()->status, head_.refusal()->sentence);
      break;
    }
    if (head_.request_line_read() && !request_line_judged_) {
      request_line_judged_ = true;  // judged at its end: a bad one is refused without waiting for the head
      if (!read_request_line()) break;
      continue;  // the rest of the head
    }
    if (head_.done()) finish_head();
    break;  // the head is whole, or every byte is used
  }
  if (state_ == State::Body && used < size) used += feed_body(data + used, size - used);
  return used;
}

void RequestReader::end_of_input() {
  if (state_ == State::Head && head_.begun()) {
    refuse(400, "the connection ended before the request's head was whole");
  } else if (state_ == State::Body) {
    refuse(400, "the connection ended before the request's body was whole (" + std::to_string(request_.body.size()) +
                    " bytes arrived)");
  }
}

HttpRequest RequestReader::take() {
  HttpRequest request = std::move(request_);
  request_ = HttpRequest{};
  head_ = HeadLines(limits_.head, true);
  state_ = State::Head;
  expect_continue_ = chunked_ = request_line_judged_ = false;
  length_ = 0;
  chunks_.reset();
  return request;
}

void RequestReader::finish_head() {
  request_.fields = std::move(head_.fields());
  if (!read_framing()) return;
  if (chunked_) {
    chunks_ = std::make_unique<ChunkedBody>(limits_.max_body_bytes, limits_.head, [this](int64_t bytes) {
      return request_.body_claim.grow(budget_, bytes);
    });
    state_ = State::Body;
  } else {
    state_ = length_ > 0 ? State::Body : State::Complete;
  }
}

// METHOD SP TARGET SP HTTP/1.x, one space apart.
bool RequestReader::read_request_line() {
  const std::string& line = head_.request_line();
  const size_t first = line.find(' ');
  const size_t second = first == std::string::npos ? first : line.find(' ', first + 1);
  if (second == std::string::npos || first == 0 || second == first + 1 || second + 1 == line.size() ||
      line.find(' ', second + 1) != std::string::npos) {
    refuse(400, "the request line '" + json::printable(line, 80) + "' is not METHOD, TARGET and HTTP/1.1 one space apart");
    return false;
  }
  request_.method = line.substr(0, first);
  request_.target = line.substr(first + 1, second - first - 1);
  const std::string version = line.substr(second + 1);
  for (const char c : request_.method) {
    if (!is_token_char(static_cast<unsigned char>(c))) {
      refuse(400, "the method '" + json::printable(request_.method) + "' is not a token");
      return false;
    }
  }
  for (const char c : request_.target) {
    if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
      refuse(400, "the request target holds a byte that must be percent-encoded");
      return false;
    }
  }
  if (version == "HTTP/1.1" || version == "HTTP/1.0") {
    request_.version = version == "HTTP/1.1" ? 11 : 10;
  } else if (version.size() == 8 && version.compare(0, 5, "HTTP/") == 0 && std::isdigit(static_cast<unsigned char>(version[5])) && version[6] == '.' &&
             std::isdigit(static_cast<unsigned char>(version[7]))) {
    refuse(505, "the service speaks HTTP/1.1 and HTTP/1.0, not " + version);
    return false;
  } else {
    refuse(400, "the request line ends in '" + json::printable(version) + "', not HTTP/1.1");
    return false;
  }
  std::string target = request_.target;
  if (target[0] != '/' && target != "*") {
    const std::string lower = lowercase(target.substr(0, 8));
    const size_t scheme = lower.compare(0, 7, "http://") == 0 ? 7 : lower.compare(0, 8, "https://") == 0 ? 8 : 0;
    if (scheme == 0) {
      refuse(400, "the request target '" + json::printable(target) + "' is not a path beginning with '/'");
      return false;
    }
    const size_t path = target.find_first_of("/?", scheme);
    target = path == std::string::npos ? "/" : target[path] == '?' ? "/" + target.substr(path) : target.substr(path);
  }
  const size_t question = target.find('?');
  request_.path = percent_decode(target.substr(0, question), false);
  request_.query = question == std::string::npos ? "" : target.substr(question + 1);
  return true;
}

bool RequestReader::read_framing() {
  const Framing f = framing_of(request_.fields);
  const bool http11 = request_.version == 11;
  std::optional<HttpRefusal> refusal = other_fields(f, http11);
  if (!refusal) refusal = body_framing(f, http11, chunked_, length_);
  if (!refusal && is_body_method(request_.method) && !f.has_length && !f.has_coding) {
    refusal = HttpRefusal{411, request_.method + " needs a Content-Length (or a chunked body)"};
  }
  if (!refusal && length_ > static_cast<uint64_t>(limits_.max_body_bytes)) {
    refusal = HttpRefusal{413, "the body is larger than the " + std::to_string(limits_.max_body_bytes >> 20) + " MiB the service reads"};
  }
  if (!refusal && length_ > 0 && !request_.body_claim.grow(budget_, static_cast<int64_t>(length_))) {
    refusal = HttpRefusal{503, "the service holds as many request bodies as it may at once; retry shortly"};
  }
  if (refusal) {
    refuse(refusal->status, std::move(refusal->sentence));
    return false;
  }
  if (length_ > 0) request_.body.reserve(static_cast<size_t>(length_));
  expect_continue_ = http11 && f.expect == "100-continue";
  request_.keep_alive = http11;
  for (const std::string& token : f.connection) {
    if (token == "keep-alive") request_.keep_alive = true;
  }
  for (const std::string& token : f.connection) {
    if (token == "close") request_.keep_alive = false;
  }
  return true;
}

size_t RequestReader::feed_body(const char* data, size_t size) {
  if (chunked_) {
    const size_t used = chunks_->feed(data, size, request_.body);
    if (chunks_->refusal()) refuse(chunks_->refusal()->status, chunks_->refusal()->sentence);
    else if (chunks_->done()) state_ = State::Complete;
    return used;
  }
  const size_t take = static_cast<size_t>(std::min<uint64_t>(length_ - request_.body.size(), size));
  request_.body.append(data, take);
  if (request_.body.size() == length_) state_ = State::Complete;
  return take;
}

}  // namespace facegen::serve
