// oip.hpp: the Open Inference Protocol (KServe v2, Triton's HTTP/REST API) for each model the service
// serves, by its name ("facegen" where --model gives none), version "1": its metadata, an inference
// request read, its answer made; and Triton's extensions that clients and perf_analyzer call: the model
// configuration (GET .../config: the JSON of Triton's ModelConfig), the statistics (metrics.hpp
// makes them) and the model repository's index (POST /v2/repository/index; its load and unload are not
// offered: the models are the command line's).
//
//   inputs   latents  FP32   [N, nz]   the latents themselves, or
//            seeds    UINT64 [N]       each seed's latent (as --seeds), exactly one of the two
//   output   images   UINT8  [N, S, S, 3]   8-bit RGB, S the model's image size, the bytes of `facegen
//                                     --formats npy-u8` after its header (channel_to_byte; a grey
//                                     model's value repeated)
// N from 1 to 4,096. Tensor data as JSON ("data": flat in row-major order, or nested as the shape) or,
// with the binary tensor data extension, as little-endian bytes after the JSON: the JSON's length in
// the Inference-Header-Content-Length field, each binary input's bytes in its "binary_data_size"
// parameter. The output goes as binary where the request asks ("binary_data": true on the output, or
// "binary_data_output": true among the request's parameters). Anything else is a RequestError (400)
// with one sentence, answered as {"error": "..."}.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/model_spec.hpp"
#include "serve/batcher.hpp"
#include "serve/http_message.hpp"
#include "serve/request.hpp"

namespace facegen::serve {

constexpr const char* kOipModelName = "facegen";  // the name of a model given without one
constexpr const char* kOipModelVersion = "1";
constexpr const char* kOipBinaryLengthField = "Inference-Header-Content-Length";

// GET /v2: {"name", "version", "extensions"}; `version`: the build's (its git commit).
std::string oip_server_metadata(const std::string& version);
// GET /v2/models/NAME: {"name", "versions", "platform", "inputs", "outputs"}.
std::string oip_model_metadata(const std::string& name, const ModelSpec& spec);

// What Triton's model configuration says of a model: its inputs and output as the metadata's, batched
// (max_batch_size: the most images one request may ask for; dims without the batch's), its instances
// (a worker per GPU, or the CPU's one) and the batcher's wait.
struct OipModelConfig {
  std::string name;
  ModelSpec spec;
  int64_t max_batch = 256;  // the batcher's --max-batch, told as the preferred batch size
  double max_delay_ms = 0;
  bool gpu = false;
  int workers = 1;
};
// GET /v2/models/NAME/config: the JSON form of Triton's ModelConfig.
std::string oip_model_config(const OipModelConfig& config);

// POST /v2/repository/index's body: empty or {"ready": true|false}; returns "ready". RequestError (400)
// for anything else.
bool parse_repository_index(const std::string& body);
// [{"name", "version": "1", "state", "reason": ""}, ...] of the models `names`.
std::string oip_repository_index(const std::vector<std::string>& names, const std::string& state);

struct InferRequest {
  std::string id;       // echoed in the answer where given
  bool has_id = false;
  GenerateSpec images;  // count and latents (count, nz); seeds where "seeds" was the input
  bool binary_output = false;
};

// Reads POST /v2/models/facegen/infer's body; `json_length`: the Inference-Header-Content-Length
// field's value ("" where the request has none: then the whole body is JSON). `nz`: the model's.
InferRequest parse_infer(const std::string& body, const std::string& json_length, int nz);

struct InferAnswer {
  std::string body;
  std::string content_type;  // application/json, or application/octet-stream with binary output
  std::string json_length;   // Inference-Header-Content-Length's value with binary output, else ""
};

// The answer to `request` for its images (count, S, S, nc) floats of model `model` of this spec
// (oip_answer.cpp).
InferAnswer encode_infer(const InferRequest& request, const float* images, const ModelSpec& spec, const std::string& model);
// The same answer from the images' 8-bit pixels (count, S, S, 3) as the batcher made them
// (ImageProduct::Pixels): with binary output the JSON, then the pixels as they lie
// (HttpResponse::slices, no copy).
void answer_infer(const InferRequest& request, const std::string& model, const MadeImages& made, const ModelSpec& spec,
                  HttpResponse& response);

}  // namespace facegen::serve
