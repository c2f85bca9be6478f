// fuzz_serve_request.cpp: libFuzzer target for the service's request checks: the JSON parser
// (serve/json.cpp), the body of POST /v1/generate (serve/request.cpp), the seed of a path, and the
// body of an Open Inference Protocol request (serve/oip.cpp).
//
// Input: byte 0 picks nz (1..8 or 100); the rest is the body. Acceptable outcomes: a GenerateSpec
// that keeps every promise (1 to 4,096 images, count x nz finite latents, a seed per image or none,
// png only for one image, a mosaic's columns and padding in range, nothing else with them), or a
// RequestError of status 400 with a one-line sentence. The same bytes as a path's seed: a seed whose
// decimal text is the input's (leading zeros aside), or a RequestError. The same bytes as an
// inference request, whole JSON and with its first half as JSON (the rest binary): 1 to 4,096 images,
// count x nz finite latents, a seed per image or none, or a RequestError.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "serve/oip.hpp"
#include "serve/request.hpp"

namespace {

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "broken promise: %s\n", what);
    std::abort();
  }
}

void check_spec(const facegen::serve::GenerateSpec& spec, int nz) {
  using facegen::OutputFormat;
  require(spec.count >= 1 && spec.count <= facegen::serve::kMaxRequestImages, "image count");
  require(static_cast<int64_t>(spec.latents.size()) == spec.count * nz, "latent values");
  for (float v : spec.latents) require(std::isfinite(v), "a finite latent");
  require(spec.seeds.empty() || static_cast<int64_t>(spec.seeds.size()) == spec.count, "a seed per image");
  require(spec.format.format != OutputFormat::Png || spec.count == 1, "png holds one image");
  const bool mosaic = spec.format.format == OutputFormat::MosaicPng;
  require(mosaic || (spec.columns == 0 && spec.padding == 0), "grid only for a mosaic");
  require(spec.columns >= 0 && spec.columns <= facegen::serve::kMaxMosaicColumns, "columns");
  require(spec.padding >= 0 && spec.padding <= facegen::kMaxGridPadding, "padding");
}

void check_error(const facegen::serve::RequestError& e) {
  const std::string sentence = e.what();
  require(e.status == 400, "status 400");
  require(!sentence.empty() && sentence.find('\n') == std::string::npos, "one line");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int nz = data[0] % 9 == 0 ? 100 : data[0] % 9;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    check_spec(facegen::serve::parse_generate(body, nz), nz);
  } catch (const facegen::serve::RequestError& e) {
    check_error(e);
  }
  for (const std::string& json_length : {std::string(), std::to_string(body.size() / 2)}) {
    try {
      const facegen::serve::InferRequest infer = facegen::serve::parse_infer(body, json_length, nz);
      const facegen::serve::GenerateSpec& spec = infer.images;
      require(spec.count >= 1 && spec.count <= facegen::serve::kMaxRequestImages, "inference: image count");
      require(static_cast<int64_t>(spec.latents.size()) == spec.count * nz, "inference: latent values");
      for (float v : spec.latents) require(std::isfinite(v), "inference: a finite latent");
      require(spec.seeds.empty() || static_cast<int64_t>(spec.seeds.size()) == spec.count, "inference: a seed per image");
    } catch (const facegen::serve::RequestError& e) {
      check_error(e);
    }
  }
  try {
    const uint64_t seed = facegen::serve::parse_seed(body, "seed");
    const size_t first = body.find_first_not_of('0');
    require(std::to_string(seed) == (first == std::string::npos ? "0" : body.substr(first)), "the seed's text");
  } catch (const facegen::serve::RequestError& e) {
    check_error(e);
  }
  return 0;
}
