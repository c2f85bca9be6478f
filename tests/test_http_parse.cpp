// test_http_parse.cpp: the HTTP request reader (serve/http_parse.hpp, http_lines.hpp,
// chunked_body.hpp) against RFC 9112's framing rules. Every case is fed whole, a byte at a time and
// split at every position, since a connection's bytes may arrive in any pieces: the outcome (a
// request, or a refusal's status) must not depend on how they were cut. A request that is accepted
// is checked field by field and body byte by body byte; a chunked body is checked against the body it
// was made from, for random bodies cut into random chunks with random extensions and trailers.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "serve/http_parse.hpp"

using namespace facegen::serve;

namespace {

HttpLimits small_limits() {
  HttpLimits limits;
  limits.head.max_bytes = 1024;
  limits.head.max_fields = 10;
  limits.head.max_request_line = 256;
  limits.max_body_bytes = 1000;
  return limits;
}

struct Outcome {
  RequestReader::State state = RequestReader::State::Head;
  int status = 0;            // a refusal's
  std::string sentence;
  HttpRequest request;       // when Complete
  size_t used = 0;           // bytes of the input the request took
};

// Feeds `bytes` in pieces that begin at the offsets in `cuts`, stopping when the reader stops.
Outcome feed_in_pieces(const std::string& bytes, const std::vector<size_t>& cuts, MemoryBudget& budget,
                       const HttpLimits& limits = small_limits()) {
  RequestReader reader(limits, budget);
  Outcome out;
  size_t at = 0;
  for (size_t k = 0; k <= cuts.size() && at < bytes.size(); ++k) {
    const size_t end = k < cuts.size() ? std::max(at, std::min(cuts[k], bytes.size())) : bytes.size();
    size_t piece_at = at;
    while (piece_at < end) {
      const size_t used = reader.feed(bytes.data() + piece_at, end - piece_at);
      piece_at += used;
      if (reader.state() == RequestReader::State::Complete || reader.state() == RequestReader::State::Refused) break;
      if (used == 0) break;
    }
    out.used = piece_at;
    at = end;
    if (reader.state() == RequestReader::State::Complete || reader.state() == RequestReader::State::Refused) break;
  }
  out.state = reader.state();
  if (out.state == RequestReader::State::Refused) {
    out.status = reader.refusal().status;
    out.sentence = reader.refusal().sentence;
  }
  if (out.state == RequestReader::State::Complete) {
    out.request = reader.take();
    out.request.body_claim = MemoryBudget::Claim();  // given back: the budget is the caller's
  }
  return out;
}

// The outcome of `bytes` fed whole, byte by byte and cut at every single position: all the same.
Outcome read(const std::string& bytes, const HttpLimits& limits = small_limits()) {
  MemoryBudget budget(1 << 20);
  Outcome whole = feed_in_pieces(bytes, {}, budget, limits);
  std::vector<size_t> every;
  for (size_t k = 1; k < bytes.size(); ++k) every.push_back(k);
  const Outcome bytewise = feed_in_pieces(bytes, every, budget, limits);
  CHECK(bytewise.state == whole.state);
  CHECK(bytewise.status == whole.status);
  CHECK(bytewise.used == whole.used);
  CHECK(bytewise.request.body == whole.request.body);
  for (size_t cut = 1; cut < bytes.size() && bytes.size() < 400; ++cut) {
    const Outcome two = feed_in_pieces(bytes, {cut}, budget, limits);
    CHECK(two.state == whole.state);
    CHECK(two.status == whole.status);
    CHECK(two.request.body == whole.request.body);
  }
  CHECK(budget.used() == 0);  // every claim given back
  return whole;
}

int refused(const std::string& bytes) {
  const Outcome out = read(bytes);
  if (out.state != RequestReader::State::Refused) return 0;
  CHECK(!out.sentence.empty());
  CHECK(out.sentence.find('\n') == std::string::npos);
  return out.status;
}

const std::string kGet = "GET /healthz HTTP/1.1\r\nHost: x\r\n";
const std::string kPost = "POST /v1/generate HTTP/1.1\r\nHost: x\r\n";

}  // namespace

TEST_CASE("http: a plain request is read whole, with its fields, path and query") {
  const Outcome out = read("GET /v1/latents?seeds=3%2C5&x=a+b HTTP/1.1\r\nHost: example\r\nX-Thing:  spaced value \t\r\n\r\n");
  REQUIRE(out.state == RequestReader::State::Complete);
  CHECK(out.request.method == "GET");
  CHECK(out.request.path == "/v1/latents");
  CHECK(out.request.param("seeds").value() == "3,5");
  CHECK(out.request.param("x").value() == "a b");
  CHECK(!out.request.param("y").has_value());
  CHECK(out.request.header("x-thing") == "spaced value");
  CHECK(out.request.version == 11);
  CHECK(out.request.keep_alive);
  CHECK(out.request.body.empty());
}

TEST_CASE("http: bodies by Content-Length and by chunks; keep-alive as the version and Connection say") {
  Outcome out = read(kPost + "Content-Length: 5\r\n\r\nhello");
  REQUIRE(out.state == RequestReader::State::Complete);
  CHECK(out.request.body == "hello");
  out = read(kPost + "Transfer-Encoding: chunked\r\n\r\n5;name=value\r\nhello\r\n3\r\n, w\r\n0\r\nTrailer: t\r\n\r\n");
  REQUIRE(out.state == RequestReader::State::Complete);
  CHECK(out.request.body == "hello, w");
  CHECK(read(kPost + "Content-Length: 5, 5\r\n\r\nhello").request.body == "hello");  // a list of one value
  CHECK(read(kPost + "Content-Length: 05\r\nContent-Length: 5\r\n\r\nhello").request.body == "hello");
  CHECK(!read(kGet + "Connection: close\r\n\r\n").request.keep_alive);
  CHECK(!read("GET / HTTP/1.0\r\n\r\n").request.keep_alive);
  CHECK(read("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").request.keep_alive);
  CHECK(read("\r\n" + kGet + "\r\n").state == RequestReader::State::Complete);  // an empty line before: skipped
  CHECK(read("GET http://host:8080/healthz?a=1 HTTP/1.1\r\nHost: host\r\n\r\n").request.path == "/healthz");
}

TEST_CASE("http: a GET with a body has it read and set aside, not read as a second request") {
  const std::string inner = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string bytes = kGet + "Content-Length: " + std::to_string(inner.size()) + "\r\n\r\n" + inner;
  const Outcome out = read(bytes);
  REQUIRE(out.state == RequestReader::State::Complete);
  CHECK(out.request.path == "/healthz");
  CHECK(out.request.body == inner);
  CHECK(out.used == bytes.size());
}

TEST_CASE("http: pipelined requests are read one at a time, each taking only its own bytes") {
  const std::string first = kPost + "Content-Length: 3\r\n\r\nabc";
  const std::string second = kGet + "\r\n";
  MemoryBudget budget(1 << 20);
  RequestReader reader(small_limits(), budget);
  const std::string both = first + second;
  const size_t used = reader.feed(both.data(), both.size());
  CHECK(used == first.size());
  REQUIRE(reader.state() == RequestReader::State::Complete);
  CHECK(reader.take().body == "abc");
  CHECK(reader.feed(both.data() + used, both.size() - used) == second.size());
  REQUIRE(reader.state() == RequestReader::State::Complete);
  CHECK(reader.take().path == "/healthz");
}

TEST_CASE("http: ambiguous framing is refused with 400") {
  CHECK(refused(kPost + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n") == 400);
  CHECK(refused(kPost + "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n") == 400);
  CHECK(refused(kPost + "Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd") == 400);
  CHECK(refused(kPost + "Content-Length: 3, 4\r\n\r\nabcd") == 400);
  for (const char* length : {"+34", "34a", "-1", "", "3 4", "0x10", "1e3", "3,", ",3", " 3 ,, 3"}) {
    CAPTURE(length);
    CHECK(refused(kPost + "Content-Length: " + length + "\r\n\r\n" + std::string(34, 'a')) == 400);
  }
  CHECK(refused(kPost + "Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n") == 400);
  CHECK(refused(kPost + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n") == 400);
  CHECK(refused(kPost + "Transfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n") == 400);  // chunked not last
  CHECK(refused(kPost + "Transfer-Encoding: gzip\r\n\r\nabc") == 400);
  CHECK(refused(kPost + "Transfer-Encoding: \r\n\r\nabc") == 400);
  CHECK(refused("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n") == 400);
}

TEST_CASE("http: an unknown transfer coding before chunked is 501; a POST without a length 411") {
  CHECK(refused(kPost + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n") == 501);
  CHECK(refused(kPost + "Transfer-Encoding: x-custom\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n") == 501);
  CHECK(refused(kPost + "\r\n") == 411);
  CHECK(refused("PUT /x HTTP/1.1\r\nHost: x\r\n\r\n") == 411);
}

TEST_CASE("http: malformed chunks are refused with 400, a chunked body past the limit with 413") {
  const std::string chunked = kPost + "Transfer-Encoding: chunked\r\n\r\n";
  for (const char* body : {"-1\r\nabc\r\n0\r\n\r\n", "0x3\r\nabc\r\n0\r\n\r\n", "+3\r\nabc\r\n0\r\n\r\n", "\r\nabc\r\n0\r\n\r\n",
                           " 3\r\nabc\r\n0\r\n\r\n", "3g\r\nabc\r\n0\r\n\r\n", "3\nabc\r\n0\r\n\r\n", "3\r\nabc\n0\r\n\r\n",
                           "3\r\nabcd\r\n0\r\n\r\n", "3\rxabc\r\n0\r\n\r\n", "3\r\nabc\r\n0\r\n\n",
                           "10000000000000000\r\nabc\r\n0\r\n\r\n", "ffffffffffffffffffff\r\nabc\r\n0\r\n\r\n",
                           "3;a=\x01\r\nabc\r\n0\r\n\r\n", "3 3\r\nabc\r\n0\r\n\r\n", "3 x\r\nabc\r\n0\r\n\r\n", "3\r\nabc\r\n0\r\n folded\r\n\r\n"}) {
    CAPTURE(body);
    CHECK(refused(chunked + body) == 400);
  }
  CHECK(refused(chunked + "3e9\r\nabc\r\n0\r\n\r\n") == 413);                        // 1,001 bytes
  CHECK(refused(chunked + "1f4\r\n" + std::string(500, 'a') + "\r\n1f5\r\n") == 413);  // 500 + 501
  CHECK(read(chunked + "1f4\r\n" + std::string(500, 'a') + "\r\n1f4\r\n" + std::string(500, 'b') + "\r\n0\r\n\r\n").request.body.size() == 1000);
  CHECK(refused(chunked + "00000000000000000003\r\nabc\r\n0\r\n\r\n") == 0);          // leading zeros are no digits of the size
  CHECK(read(chunked + "3 \t; name = \"v;x\"\r\nabc\r\n0 ;e\r\n\r\n").request.body == "abc");  // white space before ';'

}

TEST_CASE("http: a body announced past the limit is 413 before any of it comes") {
  CHECK(refused(kPost + "Content-Length: 1001\r\n\r\n") == 413);
  CHECK(refused(kPost + "Content-Length: 99999999999999999999999\r\n\r\n") == 413);
  CHECK(read(kPost + "Content-Length: 1000\r\n\r\n" + std::string(1000, 'x')).request.body.size() == 1000);
}

TEST_CASE("http: a malformed head is refused with 400, never guessed at") {
  CHECK(refused("GET /healthz HTTP/1.1\nHost: x\n\n") == 400);            // bare LF
  CHECK(refused("GET /healthz HTTP/1.1\r\nHost: x\n\r\n") == 400);
  CHECK(refused("GET /healthz HTTP/1.1\r\nHost: x\r\n\n") == 400);
  CHECK(refused("GET /healthz HTTP/1.1\rHost: x\r\n\r\n") == 400);        // bare CR
  CHECK(refused(kGet + "X-A: b\r\n c\r\n\r\n") == 400);                   // obs-fold
  CHECK(refused(kGet + "X-A: b\r\n\tc\r\n\r\n") == 400);
  CHECK(refused("GET /healthz HTTP/1.1\r\n Host: x\r\n\r\n") == 400);     // white space before the first field
  CHECK(refused(kGet + "Bad Name: x\r\n\r\n") == 400);
  CHECK(refused(kGet + "X-A : x\r\n\r\n") == 400);
  CHECK(refused(kGet + ": x\r\n\r\n") == 400);
  CHECK(refused(kGet + "no colon\r\n\r\n") == 400);
  CHECK(refused(kGet + std::string("X-A: a\0b\r\n\r\n", 12)) == 400);
  CHECK(refused("GET  /healthz HTTP/1.1\r\nHost: x\r\n\r\n") == 400);
  CHECK(refused("GET /a b HTTP/1.1\r\nHost: x\r\n\r\n") == 400);
  CHECK(refused("GET /healthz\r\nHost: x\r\n\r\n") == 400);               // HTTP/0.9
  CHECK(refused("GET /healthz HTTP/1.1 \r\nHost: x\r\n\r\n") == 400);
  CHECK(refused("G(T /healthz HTTP/1.1\r\nHost: x\r\n\r\n") == 400);
  CHECK(refused("GET healthz HTTP/1.1\r\nHost: x\r\n\r\n") == 400);
  CHECK(refused("GET /h\xc3\xa9 HTTP/1.1\r\nHost: x\r\n\r\n") == 400);
  CHECK(refused("\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n") == 400);  // more than two empty lines first
  CHECK(refused("GET / HTTP/1.1\r\n\r\n") == 400);                         // no Host in HTTP/1.1
  CHECK(refused(kGet + "Host: y\r\n\r\n") == 400);                         // two
  CHECK(refused("GET / HTTP/2.0\r\nHost: x\r\n\r\n") == 505);
  CHECK(refused("GET / HTTP/1.2\r\nHost: x\r\n\r\n") == 505);
  CHECK(refused("GET / HTTPS/1.1\r\nHost: x\r\n\r\n") == 400);
}

// Every shape of request line that is wrong as a line, with its status.
struct BadLine {
  const char* line;
  int status;
};
const BadLine kBadRequestLines[] = {
    {"GET /healthz", 400},                 // HTTP/0.9: no version
    {"GET", 400},                          // a method alone
    {"GET ", 400},
    {"GET  /healthz HTTP/1.1", 400},       // two spaces
    {"GET /healthz  HTTP/1.1", 400},
    {" GET /healthz HTTP/1.1", 400},       // a space first
    {"GET /healthz HTTP/1.1 ", 400},       // a space last
    {"GET /healthz HTTP/1.1 x", 400},      // a fourth part
    {"GET /a b HTTP/1.1", 400},            // a space in the target
    {"G(T /healthz HTTP/1.1", 400},        // a method that is not a token
    {"G\xc3\xa9T /healthz HTTP/1.1", 400},
    {"GET healthz HTTP/1.1", 400},         // a target that is not a path
    {"GET ftp://x/ HTTP/1.1", 400},
    {"GET /h\xc3\xa9 HTTP/1.1", 400},      // a byte to percent-encode in the target
    {"GET /a\tb HTTP/1.1", 400},
    {"GET /healthz http/1.1", 400},        // not HTTP/ as written
    {"GET /healthz HTTPS/1.1", 400},
    {"GET /healthz HTTP/1", 400},
    {"GET /healthz HTTP/1.1.1", 400},
    {"GET /healthz HTTP/x.y", 400},
    {"GET /healthz HTTP/2.0", 505},        // another version
    {"GET /healthz HTTP/1.2", 505},
    {"GET /healthz HTTP/0.9", 505},
};

TEST_CASE("http: a bad request line is refused at its end, before any more of the head comes") {
  MemoryBudget budget(1 << 20);
  for (const BadLine& bad : kBadRequestLines) {
    const std::string line = std::string(bad.line) + "\r\n";
    CAPTURE(line);
    // The line and its CRLF alone (as a client that sends nothing more, e.g. HTTP/0.9's): refused now.
    std::vector<size_t> every;
    for (size_t k = 1; k < line.size(); ++k) every.push_back(k);
    for (const std::vector<size_t>& cuts : {std::vector<size_t>{}, every}) {
      const Outcome out = feed_in_pieces(line, cuts, budget);
      CHECK(out.state == RequestReader::State::Refused);
      CHECK(out.status == bad.status);
      CHECK(out.used == line.size());
    }
    // With a head after it that is wrong too: the request line's fault is the one told.
    CHECK(refused(line + "X-A b\r\nHost: x\r\n\r\n") == bad.status);
  }
  // A good request line alone waits for the rest of the head, and is read whole with it.
  for (const char* good : {"GET /healthz HTTP/1.1", "GET /healthz HTTP/1.0", "GET http://x/healthz HTTP/1.1", "OPTIONS * HTTP/1.1"}) {
    CAPTURE(good);
    const Outcome waiting = feed_in_pieces(std::string(good) + "\r\n", {}, budget);
    CHECK(waiting.state == RequestReader::State::Head);
    CHECK(read(std::string(good) + "\r\nHost: x\r\n\r\n").state == RequestReader::State::Complete);
  }
}

TEST_CASE("http: heads past their limits are refused with 431 (414 for the request line alone)") {
  CHECK(refused("GET /" + std::string(300, 'a') + " HTTP/1.1\r\nHost: x\r\n\r\n") == 414);
  std::string many = kGet;
  for (int k = 0; k < 10; ++k) many += "X-" + std::to_string(k) + ": v\r\n";
  CHECK(refused(many + "\r\n") == 431);                                    // 11 fields with Host
  CHECK(refused(kGet + "X-Big: " + std::string(1100, 'v') + "\r\n\r\n") == 431);
  std::string trailer = kPost + "Transfer-Encoding: chunked\r\n\r\n0\r\n";
  for (int k = 0; k < 11; ++k) trailer += "T-" + std::to_string(k) + ": v\r\n";
  CHECK(refused(trailer + "\r\n") == 431);
}

TEST_CASE("http: content codings are refused with 415, expectations other than 100-continue with 417") {
  CHECK(refused(kPost + "Content-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc") == 415);
  CHECK(refused(kPost + "Content-Encoding: identity, br\r\nContent-Length: 3\r\n\r\nabc") == 415);
  CHECK(read(kPost + "Content-Encoding: identity\r\nContent-Length: 3\r\n\r\nabc").request.body == "abc");
  CHECK(refused(kPost + "Expect: 200-ok\r\nContent-Length: 3\r\n\r\nabc") == 417);
}

TEST_CASE("http: 100-continue is wanted once, after the head and before the body") {
  MemoryBudget budget(1 << 20);
  RequestReader reader(small_limits(), budget);
  const std::string head = kPost + "Expect: 100-continue\r\nContent-Length: 3\r\n\r\n";
  reader.feed(head.data(), head.size());
  CHECK(reader.wants_continue());
  reader.continue_sent();
  CHECK(!reader.wants_continue());
  reader.feed("abc", 3);
  CHECK(reader.state() == RequestReader::State::Complete);
}

TEST_CASE("http: a client that closes mid-request is refused with 400; with nothing begun, nothing is") {
  MemoryBudget budget(1 << 20);
  RequestReader idle(small_limits(), budget);
  idle.end_of_input();
  CHECK(idle.state() == RequestReader::State::Head);
  for (const std::string& part : {std::string("GET /hea"), kPost + "Content-Length: 5\r\n\r\nabc",
                                  kPost + "Transfer-Encoding: chunked\r\n\r\n3\r\nab"}) {
    RequestReader reader(small_limits(), budget);
    reader.feed(part.data(), part.size());
    reader.end_of_input();
    CHECK(reader.state() == RequestReader::State::Refused);
    CHECK(reader.refusal().status == 400);
  }
  CHECK(budget.used() == 0);
}

TEST_CASE("http: bodies claim their bytes from the budget; past it 503, and every claim is given back") {
  MemoryBudget budget(1500);
  RequestReader first(small_limits(), budget), second(small_limits(), budget);
  const std::string head = kPost + "Content-Length: 1000\r\n\r\n";
  first.feed(head.data(), head.size());
  CHECK(budget.used() == 1000);
  second.feed(head.data(), head.size());
  REQUIRE(second.state() == RequestReader::State::Refused);
  CHECK(second.refusal().status == 503);
  const std::string chunked = kPost + "Transfer-Encoding: chunked\r\n\r\n1f4\r\n" + std::string(500, 'a') + "\r\n1\r\n";
  RequestReader third(small_limits(), budget);
  third.feed(chunked.data(), chunked.size());
  CHECK(third.state() == RequestReader::State::Refused);  // 500 fit, the next byte did not
  CHECK(third.refusal().status == 503);
  const std::string body(1000, 'z');
  first.feed(body.data(), body.size());
  REQUIRE(first.state() == RequestReader::State::Complete);
  {
    HttpRequest request = first.take();
    CHECK(budget.used() >= 1000);
  }
  RequestReader fourth(small_limits(), budget);
  fourth.feed(head.data(), head.size());
  CHECK(fourth.state() == RequestReader::State::Body);
}

TEST_CASE("http: random bodies in random chunks, extensions and trailers come back whole") {
  std::mt19937 rng(38);
  HttpLimits limits = small_limits();
  limits.max_body_bytes = 100000;
  for (int round = 0; round < 200; ++round) {
    std::string body(rng() % 3000, '\0');
    for (char& c : body) c = static_cast<char>(rng());
    std::string bytes = kPost + "Transfer-Encoding: chunked\r\n\r\n";
    for (size_t at = 0; at < body.size();) {
      const size_t n = std::min<size_t>(body.size() - at, 1 + rng() % 700);
      char size[32];
      std::snprintf(size, sizeof size, rng() % 2 ? "%zx" : "%zX", n);
      bytes += std::string(rng() % 3, '0') + size + (rng() % 3 == 0 ? ";ext=\"v\";x" : "") + "\r\n" + body.substr(at, n) + "\r\n";
      at += n;
    }
    bytes += "0\r\n" + std::string(rng() % 2 ? "Trailer-Field: v\r\n" : "") + "\r\n";
    const std::string next = kGet + "\r\n";
    MemoryBudget budget(1 << 20);
    std::vector<size_t> cuts;
    for (size_t at = 0; at < bytes.size(); at += 1 + rng() % 200) cuts.push_back(at);
    const Outcome out = feed_in_pieces(bytes + next, cuts, budget, limits);
    REQUIRE(out.state == RequestReader::State::Complete);
    CHECK(out.request.body == body);
    CHECK(out.used == bytes.size());
  }
}

TEST_CASE("http: an answer's head is ASCII lines whatever bytes its fields were given") {
  HttpResponse response;
  response.set(404, "application/json", "{}");
  std::string every;
  for (int b = 0; b < 256; ++b) every += static_cast<char>(b);
  response.fields.push_back({"X-Echo", every});
  response.fields.push_back({"X-\r\nInjected", "a\r\nSet-Cookie: b"});
  response.slices.push_back({"12345", 5});
  const std::string head = response_head(response, 11, true);
  CHECK(head.size() > 4);
  CHECK(head.compare(head.size() - 4, 4, "\r\n\r\n") == 0);
  const std::string lines = head.substr(0, head.size() - 4);
  size_t count = 0;
  for (size_t at = 0; at <= lines.size(); ++count) {
    const size_t end = std::min(lines.find("\r\n", at), lines.size());
    for (size_t k = at; k < end; ++k) {
      const auto c = static_cast<unsigned char>(lines[k]);
      CHECK(((c >= 0x20 && c < 0x7f) || c == '\t'));
    }
    at = end + 2;
  }
  CHECK(count == 6);  // status, Date, Content-Type, Content-Length, the two fields: nothing injected
  CHECK(head.find("Content-Length: 7\r\n") != std::string::npos);  // the body and its slices
  CHECK(head.find("\r\nSet-Cookie") == std::string::npos);
}
