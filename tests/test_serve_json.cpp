// test_serve_json.cpp: the service's JSON parser (serve/json.hpp) and request checks
// (serve/request.hpp): what RFC 8259 allows is read, everything else refused in one sentence that
// names the byte; the generate body's rules (exactly one of seeds and latents, nz numbers, finite,
// the image limit, formats and their options), each refused with status 400 and its sentence.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "latents/latent_source.hpp"
#include "serve/json.hpp"
#include "serve/request.hpp"
#include "serve/routes.hpp"

using namespace facegen;
using namespace facegen::serve;

namespace {

std::string parse_error(const std::string& text) {
  try {
    json::parse(text);
  } catch (const json::ParseError& e) {
    return e.what();
  }
  return "";
}

std::string request_error(const std::string& body, int nz = 4) {
  try {
    parse_generate(body, nz);
  } catch (const RequestError& e) {
    CHECK(e.status == 400);
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("json: values of every kind") {
  const json::Value v = json::parse(R"( {"a": [1, -2.5e3, 0, true, false, null], "b": "x\"\u00e9\ud83d\ude00\n", "c": {}} )");
  REQUIRE(v.is(json::Value::Kind::Object));
  const json::Value* a = v.find("a");
  REQUIRE(a != nullptr);
  REQUIRE(a->items.size() == 6);
  CHECK(a->items[1].text == "-2.5e3");
  CHECK(a->items[3].boolean);
  CHECK(a->items[5].is(json::Value::Kind::Null));
  CHECK(v.find("b")->text == "x\"\xc3\xa9\xf0\x9f\x98\x80\n");
  CHECK(v.find("c")->members.empty());
  CHECK(v.find("d") == nullptr);
}

TEST_CASE("json: malformed text is refused naming the byte") {
  CHECK(has(parse_error("[1, 2"), "at byte 5"));
  CHECK(has(parse_error("[1,]"), "expected a JSON value"));
  CHECK(has(parse_error("{\"a\": 1,}"), "member name"));
  CHECK(has(parse_error("[01]"), "leading zeros"));
  CHECK(has(parse_error("[NaN]"), "at byte 1"));
  CHECK(has(parse_error("[Infinity]"), "at byte 1"));
  CHECK(has(parse_error("[1.]"), "decimal point"));
  CHECK(has(parse_error("[1e]"), "exponent"));
  CHECK(has(parse_error("{'a': 1}"), "member name"));
  CHECK(has(parse_error("[1] 2"), "after the JSON value"));
  CHECK(has(parse_error("\"a\tb\""), "control character"));
  CHECK(has(parse_error("\"\\x\""), "not a JSON escape"));
  CHECK(has(parse_error("\"\xff\""), "not UTF-8"));
  CHECK(has(parse_error("\"\xc0\xaf\""), "not UTF-8"));
  CHECK(has(parse_error("\"\\ud800\""), "low surrogate"));
  CHECK(has(parse_error("{\"a\": 1, \"a\": 2}"), "given twice"));
  CHECK(has(parse_error(""), "ends where a value"));
  CHECK(has(parse_error(std::string(100, '[')), "deeper than"));
  CHECK(has(parse_error("[1,\n 2,\n x]"), "line 3, column 2"));
}

TEST_CASE("generate body: seeds become their latents, latents are read as floats") {
  const GenerateSpec seeds = parse_generate(R"({"seeds": [7, 18446744073709551615]})", 4);
  CHECK(seeds.count == 2);
  CHECK(seeds.format.format == OutputFormat::Tar);  // the default for more than one image
  CHECK(seeds.seeds[1] == 18446744073709551615ull);
  float latent[4];
  seed_latent(7, 4, latent);
  for (int v = 0; v < 4; ++v) CHECK(seeds.latents[static_cast<size_t>(v)] == latent[v]);
  const GenerateSpec given = parse_generate(R"({"latents": [[0.1, -2, 3e-2, 1E1]], "format": "npy"})", 4);
  CHECK(given.count == 1);
  CHECK(given.seeds.empty());
  CHECK(given.latents[0] == 0.1f);
  CHECK(given.latents[3] == 10.0f);
  CHECK(parse_generate(R"({"seeds": [1]})", 4).format.format == OutputFormat::Png);  // the default for one
  const GenerateSpec mosaic = parse_generate(R"({"seeds": [1, 2, 3], "format": "mosaic", "columns": 2, "padding": 1})", 4);
  CHECK(mosaic.columns == 2);
  CHECK(mosaic.padding == 1);
  // "truncation": the seeds' latents as --truncation draws them.
  const GenerateSpec truncated = parse_generate(R"({"seeds": [7, 8], "truncation": 0.25})", 4);
  CHECK(truncated.truncation == 0.25);
  seed_latent(8, 4, latent, 0.25);
  for (int v = 0; v < 4; ++v) CHECK(truncated.latents[static_cast<size_t>(4 + v)] == latent[v]);
  for (float value : truncated.latents) CHECK(std::fabs(value) <= 0.25f);
}

TEST_CASE("generate body: every kind of bad request is refused in one sentence") {
  CHECK(has(request_error("[1"), "malformed at byte 2"));
  CHECK(has(request_error("[]"), "must be a JSON object"));
  CHECK(has(request_error("{}"), "exactly one of"));
  CHECK(has(request_error(R"({"seeds": [1], "latents": [[1,2,3,4]]})"), "exactly one of"));
  CHECK(has(request_error(R"({"latents": [[1,2,3]]})"), "array of 4 numbers"));
  CHECK(has(request_error(R"({"latents": [[1,2,3,1e39]]})"), "finite"));
  CHECK(has(request_error(R"({"latents": [[1,2,3,"4"]]})"), "must be a number"));
  CHECK(has(request_error(R"({"seeds": [-1]})"), "whole number from 0"));
  CHECK(has(request_error(R"({"seeds": [1.5]})"), "whole number from 0"));
  CHECK(has(request_error(R"({"seeds": [18446744073709551616]})"), "whole number from 0"));
  CHECK(has(request_error(R"({"seeds": []})"), "empty"));
  std::string many = "{\"seeds\": [0";
  for (int k = 0; k < 4096; ++k) many += ",1";
  CHECK(has(request_error(many + "]}"), "at most 4096 images a request"));
  CHECK(has(request_error(R"({"seeds": [1], "format": "gif"})"), "unknown \"format\""));
  CHECK(has(request_error(R"({"seeds": [1, 2], "format": "png"})"), "holds one image"));
  CHECK(has(request_error(R"({"seeds": [1], "columns": 2})"), "lays out a mosaic"));
  CHECK(has(request_error(R"({"seeds": [1], "format": "mosaic", "columns": 0})"), "\"columns\" must be"));
  CHECK(has(request_error(R"({"seeds": [1], "format": "mosaic", "padding": 5000})"), "\"padding\" must be"));
  CHECK(has(request_error(R"({"seeds": [1], "colour": 2})"), "unknown member"));
  CHECK(has(request_error(R"({"latents": [[1,2,3,4]], "truncation": 1})"), "\"truncation\" applies to the latents of \"seeds\""));
  for (const char* bad : {"0", "-1", "1e999", "\"1\"", "null"}) {
    CAPTURE(bad);
    CHECK(has(request_error(std::string(R"({"seeds": [1], "truncation": )") + bad + "}"),
              "\"truncation\" must be a finite number greater than 0"));
  }
  // A client's text quoted in a sentence keeps it one line.
  CHECK(has(request_error("{\"a\\nb\": 1}"), "unknown member \"a\\nb\""));
  CHECK(has(request_error("[\"\\\n\"]"), "'\\\\n' is not a JSON escape"));
}

TEST_CASE("seeds in a path and a query") {
  CHECK(parse_seed("0", "seed") == 0);
  CHECK(parse_seed("18446744073709551615", "seed") == 18446744073709551615ull);
  CHECK_THROWS_AS(parse_seed("18446744073709551616", "seed"), RequestError);
  CHECK_THROWS_AS(parse_seed("", "seed"), RequestError);
  CHECK_THROWS_AS(parse_seed("+1", "seed"), RequestError);
  try {
    parse_seed("1\n2", "seed");
  } catch (const RequestError& e) {
    CHECK(std::string(e.what()).find('\n') == std::string::npos);
  }
  CHECK(parse_seed_query("3,5-7") == std::vector<uint64_t>{3, 5, 6, 7});
  CHECK_THROWS_AS(parse_seed_query("0-4096"), RequestError);
  CHECK_THROWS_AS(parse_seed_query("x"), RequestError);
}

TEST_CASE("the token of --token-file: only the exact bearer header passes") {
  CHECK(bearer_matches("Bearer sesame", "sesame"));
  CHECK_FALSE(bearer_matches("Bearer sesamE", "sesame"));
  CHECK_FALSE(bearer_matches("Bearer sesame2", "sesame"));
  CHECK_FALSE(bearer_matches("Bearer sesam", "sesame"));
  CHECK_FALSE(bearer_matches("", "sesame"));
  CHECK_FALSE(bearer_matches("sesame", "sesame"));
}
