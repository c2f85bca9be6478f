// request.hpp: what a client asks of the service, read and checked: the body of POST /v1/generate,
// the seed of GET /v1/images/SEED.png and the seeds of GET /v1/latents?seeds=. Every refusal is a
// RequestError: an HTTP status and one sentence saying what was wrong and what is accepted.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "formats/output_format.hpp"
#include "serve/json.hpp"

namespace facegen::serve {

// The most images one request may ask for; the service says so in the refusal.
constexpr int64_t kMaxRequestImages = 4096;
constexpr int64_t kMaxMosaicColumns = 4096;

struct RequestError : std::runtime_error {
  RequestError(int status, const std::string& sentence) : std::runtime_error(sentence), status(status) {}
  int status;
};

// The answer's format: one of the batch tool's formats (png: one image of the png folder; mosaic:
// mosaic-png; tar: the first shard; npy, npy-u8: the array).
struct ResponseFormat {
  OutputFormat format = OutputFormat::Png;
  const char* name = "png";          // as the request names it
  const char* content_type = "image/png";
};

// A checked POST /v1/generate body.
struct GenerateSpec {
  std::vector<float> latents;   // (count, nz): given, or each seed's seed_latent
  int64_t count = 0;
  std::vector<uint64_t> seeds;  // image k's seed where "seeds" was given; empty for "latents"
  double truncation = 0;        // "truncation" T with "seeds": their latents within [-T, T] (--truncation); 0: none
  ResponseFormat format;
  int64_t columns = 0;          // mosaic: tiles per row (0: a square)
  int64_t padding = 0;          // mosaic: black pixels between and around the tiles
};

// Reads {"seeds": [...]} or {"latents": [[nz numbers], ...]} (exactly one), with "format" (png, the
// default for one image; tar, the default for more; npy, npy-u8, mosaic), for mosaic, "columns"
// and "padding", and for seeds "truncation" (a finite number above 0, as --truncation). `nz`: the
// model's latent length. Throws RequestError (400).
GenerateSpec parse_generate(const std::string& body, int nz);

// A latent value as the latent files read theirs: a JSON number straight to float, finite; throws
// RequestError (400) naming `where` otherwise.
float latent_number(const json::Value& value, const std::string& where);

// A seed written as decimal digits, 0 to 18446744073709551615; throws RequestError (400) naming `what`.
uint64_t parse_seed(const std::string& text, const std::string& what);
// "3,5,100-103": the seeds of GET /v1/latents (SeedList's syntax), at most kMaxRequestImages.
std::vector<uint64_t> parse_seed_query(const std::string& text);

}  // namespace facegen::serve
