// answer.hpp: a request's images as the bytes of its format, made by the batch tool's own format
// definitions in memory (formats/memory_output.hpp): the same bytes as `facegen --formats F` writes
// for the same latents, model and precision (png: PREFIX/000000.png; tar: PREFIX-000000.tar; npy:
// PREFIX.npy; npy-u8: PREFIX.u8.npy; mosaic: PREFIX.png of mosaic-png with --grid-columns and
// --grid-padding).
#pragma once

#include <cstdint>
#include <string>

#include "common/model_spec.hpp"
#include "formats/png_encoder.hpp"
#include "serve/request.hpp"

namespace facegen::serve {

// What the batch tool records of its run in each tar sample's json, and the service's one output
// option beyond a request's (--png-level, as the batch tool's).
struct ServiceFacts {
  std::string model;      // the model's file name, no folder (a tar sample's "model")
  std::string model_xxh3; // its file's XXH3-128 (a tar sample's "model_xxh3"; "" where unknown)
  std::string precision;  // "fp32", "tf32", "bf16"
  ModelSpec spec;         // nz, nc
  int png_level = kDefaultPngLevel;  // the PNGs of png, tar and mosaic answers (formats/png_encoder.hpp)
};

// The most bytes of pixels a mosaic answer may take (its grid, padding included).
constexpr int64_t kMaxMosaicPixelBytes = int64_t{256} << 20;

// The answer's bytes for images (spec.count, 64, 64, nc). Throws RequestError (400) for a mosaic
// larger than kMaxMosaicPixelBytes.
std::string encode_answer(const GenerateSpec& spec, const float* images, const ServiceFacts& facts);

}  // namespace facegen::serve
