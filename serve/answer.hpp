// answer.hpp: a request's images as the bytes of its format, made by the batch tool's own format
// definitions (formats/output_format.hpp, in memory by formats/memory_output.hpp): the same bytes as
// `facegen --formats F` writes for the same latents, model and precision (png: PREFIX/000000.png; tar:
// PREFIX-000000.tar; npy: PREFIX.npy; npy-u8: PREFIX.u8.npy; mosaic: PREFIX.png of mosaic-png with
// --grid-columns and --grid-padding).
//
// The arrays (npy, npy-u8) and a stored PNG are answered as they lie in the batcher's slots: the
// format's header, then the slots' bytes as slices of the body (HttpResponse::slices), written to
// the socket with no copy and held until written. The others (tar, mosaic, a compressed PNG) are
// encoded from the images' 8-bit pixels into the body, work for a request thread.
#pragma once

#include <cstdint>
#include <string>

#include "common/model_spec.hpp"
#include "formats/png_encoder.hpp"
#include "serve/batcher.hpp"
#include "serve/http_message.hpp"
#include "serve/request.hpp"

namespace facegen::serve {

// What the batch tool records of its run in each tar sample's json, and the service's one output
// option beyond a request's (--png-level, as the batch tool's).
struct ServiceFacts {
  std::string model;      // the model's file name, no folder (a tar sample's "model"; "" for synthetic images)
  std::string model_xxh3; // its file's XXH3-128 (a tar sample's "model_xxh3"; "" where unknown)
  std::string precision;  // "fp32", "tf32", "bf16"
  ModelSpec spec;         // nz, nc, image size
  int png_level = kDefaultPngLevel;  // the PNGs of png, tar and mosaic answers (formats/png_encoder.hpp)
};

// The most bytes of pixels a mosaic answer may take (its grid, padding included).
constexpr int64_t kMaxMosaicPixelBytes = int64_t{256} << 20;

// What the answer needs of its images from the batcher: float32 values for npy, each image's PNG for
// a stored PNG, 8-bit pixels for the rest.
ImageProduct answer_product(const GenerateSpec& spec, const ServiceFacts& facts);
// Whether the answer is the slots' bytes behind a header (npy, npy-u8, a stored PNG): made in
// microseconds on any thread. Otherwise it is encoded (a request thread's work).
bool answer_is_gathered(const GenerateSpec& spec, const ServiceFacts& facts);
// What can be refused before the images are made: a mosaic of image_size tiles larger than
// kMaxMosaicPixelBytes (RequestError 400).
void check_answer(const GenerateSpec& spec, int image_size);
// The answer (status 200, its type, its body) to `spec` from its images, made as answer_product()
// asked.
void answer_made(const GenerateSpec& spec, const MadeImages& made, const ServiceFacts& facts, HttpResponse& response);

// The answer's bytes for images (spec.count, S, S, nc) floats, all in one string (for tests, and
// for comparing with the answers above). Throws RequestError (400) for a mosaic larger than
// kMaxMosaicPixelBytes.
std::string encode_answer(const GenerateSpec& spec, const float* images, const ServiceFacts& facts);

}  // namespace facegen::serve
