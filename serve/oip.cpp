// oip.cpp: see oip.hpp: the metadata, and an inference request read, one function per part: the
// body split into its JSON and binary parts, the request object, its input, the input's data (JSON
// or binary), the outputs asked for. The answer is made in oip_answer.cpp.
#include "serve/oip.hpp"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "latents/latent_source.hpp"
#include "serve/json.hpp"

namespace facegen::serve {
namespace {

using Kind = json::Value::Kind;

[[noreturn]] void bad(const std::string& sentence) { throw RequestError(400, sentence); }

std::string input_kinds(int nz) {
  return "latents FP32 [-1, " + std::to_string(nz) + "] or seeds UINT64 [-1]";
}

// Every member of `object` is one of `names` (a space-separated list).
void only_members(const json::Value& object, const std::string& what, const std::string& names) {
  for (const auto& member : object.members) {
    if ((" " + names + " ").find(" " + member.first + " ") == std::string::npos) {
      bad("unknown member \"" + json::printable(member.first) + "\" in " + what + " (expected " + names + ")");
    }
  }
}

const json::Value& member_of_kind(const json::Value& object, const char* name, Kind kind, const std::string& what) {
  const json::Value* value = object.find(name);
  if (value == nullptr) bad(what + " has no \"" + name + "\"");
  if (!value->is(kind)) bad(std::string("\"") + name + "\" of " + what + " must be " + json::kind_name(kind) + ", got " + json::kind_name(value->kind));
  return *value;
}

int64_t whole_number(const json::Value& value, const std::string& what) {
  const std::string& text = value.text;
  const bool digits = value.is(Kind::Number) && !text.empty() && text.size() <= 15 && text.find_first_not_of("0123456789") == std::string::npos;
  if (!digits) bad(what + " must be a whole number, got " + (value.is(Kind::Number) ? json::printable(text) : json::kind_name(value.kind)));
  return std::stoll(text);
}

bool boolean_parameter(const json::Value* parameters, const char* name, bool otherwise) {
  const json::Value* value = parameters ? parameters->find(name) : nullptr;
  if (value == nullptr) return otherwise;
  if (!value->is(Kind::Bool)) bad(std::string("the parameter \"") + name + "\" must be true or false, got " + json::kind_name(value->kind));
  return value->boolean;
}

// The tensor's elements in row-major order: `data` flat (every element a leaf), or nested exactly as
// `shape` says.
void flatten(const json::Value& data, const std::vector<int64_t>& shape, size_t dim, std::vector<const json::Value*>& out) {
  if (dim == shape.size()) {
    if (data.is(Kind::Array)) bad("\"data\" is nested deeper than the input's shape");
    out.push_back(&data);
    return;
  }
  if (!data.is(Kind::Array) || static_cast<int64_t>(data.items.size()) != shape[dim]) {
    bad("\"data\" must hold the input's elements flat or nested as its shape; dimension " + std::to_string(dim) + " should have " +
        std::to_string(shape[dim]) + " elements, got " + (data.is(Kind::Array) ? std::to_string(data.items.size()) : json::kind_name(data.kind)));
  }
  for (const json::Value& item : data.items) flatten(item, shape, dim + 1, out);
}

std::vector<const json::Value*> elements(const json::Value& data, const std::vector<int64_t>& shape, int64_t count) {
  std::vector<const json::Value*> out;
  const bool flat = !data.items.empty() && !data.items.front().is(Kind::Array);
  if (flat && shape.size() > 1) {
    if (static_cast<int64_t>(data.items.size()) != count) {
      bad("\"data\" holds " + std::to_string(data.items.size()) + " elements; the input's shape needs " + std::to_string(count));
    }
    for (const json::Value& item : data.items) {
      if (item.is(Kind::Array)) bad("\"data\" mixes numbers and arrays");
      out.push_back(&item);
    }
    return out;
  }
  flatten(data, shape, 0, out);
  return out;
}

// The input's shape: [N, nz] for latents, [N] for seeds, N from 1 to kMaxRequestImages.
std::vector<int64_t> input_shape(const json::Value& input, bool latents, int nz) {
  const json::Value& shape = member_of_kind(input, "shape", Kind::Array, "the input");
  std::vector<int64_t> dims;
  for (const json::Value& d : shape.items) dims.push_back(whole_number(d, "each dimension of \"shape\""));
  const std::string want = latents ? "[N, " + std::to_string(nz) + "]" : "[N]";
  const bool right = latents ? dims.size() == 2 && dims[1] == nz : dims.size() == 1;
  if (!right) bad(std::string("the input ") + (latents ? "latents" : "seeds") + " must have shape " + want + ", N images");
  if (dims[0] < 1 || dims[0] > kMaxRequestImages) {
    bad("the input's N is " + std::to_string(dims[0]) + "; give from 1 to " + std::to_string(kMaxRequestImages) + " images a request");
  }
  return dims;
}

// The input's values from "data" (JSON) into spec.
void json_data(const json::Value& data, const std::vector<int64_t>& shape, bool latents, int nz, GenerateSpec& spec) {
  if (!data.is(Kind::Array)) bad(std::string("\"data\" must be an array, got ") + json::kind_name(data.kind));
  const int64_t count = latents ? spec.count * nz : spec.count;
  const std::vector<const json::Value*> values = elements(data, shape, count);
  for (int64_t k = 0; k < count; ++k) {
    const json::Value& value = *values[static_cast<size_t>(k)];
    const std::string where = "element " + std::to_string(k) + " of \"data\"";
    if (latents) {
      spec.latents[static_cast<size_t>(k)] = latent_number(value, where);
    } else {
      if (!value.is(Kind::Number)) bad(where + " must be a whole number, got " + json::kind_name(value.kind));
      spec.seeds[static_cast<size_t>(k)] = parse_seed(value.text, where);
    }
  }
}

// The input's values from its binary part (little-endian, row-major) into spec.
void binary_data(const char* bytes, bool latents, GenerateSpec& spec) {
  if (latents) {
    std::memcpy(spec.latents.data(), bytes, spec.latents.size() * sizeof(float));  // x86-64: little-endian
    for (size_t k = 0; k < spec.latents.size(); ++k) {
      if (!std::isfinite(spec.latents[k])) bad("latent value " + std::to_string(k) + " of the binary data is not a finite float");
    }
  } else {
    std::memcpy(spec.seeds.data(), bytes, spec.seeds.size() * sizeof(uint64_t));
  }
}

// The one input, its values from JSON or from `binary` (the body after the JSON, `binary_size` bytes).
GenerateSpec read_input(const json::Value& inputs, int nz, const char* binary, size_t binary_size, bool binary_given) {
  if (!inputs.is(Kind::Array) || inputs.items.size() != 1) {
    bad("\"inputs\" must be an array of one input: " + input_kinds(nz));
  }
  const json::Value& input = inputs.items.front();
  if (!input.is(Kind::Object)) bad(std::string("the input must be an object, got ") + json::kind_name(input.kind));
  only_members(input, "the input", "name shape datatype parameters data");
  const std::string& name = member_of_kind(input, "name", Kind::String, "the input").text;
  if (name != "latents" && name != "seeds") bad("unknown input \"" + json::printable(name) + "\"; the model takes " + input_kinds(nz));
  const bool latents = name == "latents";
  const std::string& datatype = member_of_kind(input, "datatype", Kind::String, "the input").text;
  const char* want = latents ? "FP32" : "UINT64";
  if (datatype != want) bad("the input " + name + " must have datatype " + want + ", got \"" + json::printable(datatype) + "\"");
  const std::vector<int64_t> shape = input_shape(input, latents, nz);
  GenerateSpec spec;
  spec.count = shape[0];
  spec.latents.resize(static_cast<size_t>(spec.count * nz));  // (count, nz)
  if (!latents) spec.seeds.resize(static_cast<size_t>(spec.count));
  const json::Value* parameters = input.find("parameters");
  if (parameters && !parameters->is(Kind::Object)) bad("the input's \"parameters\" must be an object");
  const json::Value* size = parameters ? parameters->find("binary_data_size") : nullptr;
  const json::Value* data = input.find("data");
  if ((size == nullptr) == (data == nullptr)) bad("give the input's values either as \"data\" or as binary data (its \"binary_data_size\" parameter), one of the two");
  if (data) {
    if (binary_size > 0) bad("the body holds " + std::to_string(binary_size) + " bytes after its JSON, but the input's values are in \"data\"");
    json_data(*data, shape, latents, nz, spec);
  } else {
    const int64_t want_bytes = latents ? spec.count * nz * 4 : spec.count * 8;
    const int64_t given = whole_number(*size, "\"binary_data_size\"");
    if (!binary_given) bad("the input has binary data, but the request has no " + std::string(kOipBinaryLengthField) + " field");
    if (given != want_bytes) bad("\"binary_data_size\" is " + std::to_string(given) + "; the input's shape and datatype need " + std::to_string(want_bytes) + " bytes");
    if (static_cast<int64_t>(binary_size) != want_bytes) {
      bad("the body holds " + std::to_string(binary_size) + " bytes after its JSON; the input's \"binary_data_size\" says " + std::to_string(want_bytes));
    }
    binary_data(binary, latents, spec);
  }
  for (int64_t k = 0; !latents && k < spec.count; ++k) seed_latent(spec.seeds[static_cast<size_t>(k)], nz, spec.latents.data() + k * nz);
  return spec;
}

// Whether the output is asked for as binary: its own "binary_data", else the request's
// "binary_data_output", else JSON.
bool binary_output(const json::Value& root) {
  const json::Value* parameters = root.find("parameters");
  if (parameters && !parameters->is(Kind::Object)) bad("the request's \"parameters\" must be an object");
  bool binary = boolean_parameter(parameters, "binary_data_output", false);
  const json::Value* outputs = root.find("outputs");
  if (outputs == nullptr) return binary;
  if (!outputs->is(Kind::Array)) bad(std::string("\"outputs\" must be an array, got ") + json::kind_name(outputs->kind));
  for (const json::Value& output : outputs->items) {
    if (!output.is(Kind::Object)) bad("each of \"outputs\" must be an object");
    only_members(output, "an output", "name parameters");
    const std::string& name = member_of_kind(output, "name", Kind::String, "an output").text;
    if (name != "images") bad("unknown output \"" + json::printable(name) + "\"; the model's one output is images");
    const json::Value* own = output.find("parameters");
    if (own && !own->is(Kind::Object)) bad("an output's \"parameters\" must be an object");
    if (own && own->find("classification")) bad("the service has no classification extension");
    binary = boolean_parameter(own, "binary_data", binary);
  }
  return binary;
}

// The JSON part's length from Inference-Header-Content-Length: a decimal no larger than the body.
size_t json_part_length(const std::string& field, size_t body_size) {
  if (field.empty()) return body_size;
  const bool digits = field.size() <= 15 && field.find_first_not_of("0123456789") == std::string::npos;
  if (!digits || std::stoull(field) > body_size) {
    bad(std::string(kOipBinaryLengthField) + " must be a decimal number of bytes no larger than the body (" +
        std::to_string(body_size) + "), got '" + json::printable(field) + "'");
  }
  return static_cast<size_t>(std::stoull(field));
}

}  // namespace

std::string oip_server_metadata(const std::string& version) {
  return std::string("{\"name\": \"facegen\", \"version\": ") + json::quote(version) +
         ", \"extensions\": [\"binary_tensor_data\", \"model_configuration\", \"statistics\"]}\n";
}

std::string oip_model_metadata(const std::string& name, const ModelSpec& spec) {
  const std::string side = std::to_string(spec.image_size);
  return "{\"name\": " + json::quote(name) + ", \"versions\": [\"" + kOipModelVersion +
         "\"], \"platform\": \"facegen\", \"inputs\": [{\"name\": \"latents\", \"datatype\": \"FP32\", \"shape\": [-1, " +
         std::to_string(spec.latent_dim) + "]}, {\"name\": \"seeds\", \"datatype\": \"UINT64\", \"shape\": [-1]}], "
         "\"outputs\": [{\"name\": \"images\", \"datatype\": \"UINT8\", \"shape\": [-1, " + side + ", " + side + ", 3]}]}\n";
}

std::string oip_model_config(const OipModelConfig& c) {
  const std::string kind = c.gpu ? "KIND_GPU" : "KIND_CPU";
  const int64_t delay_us = static_cast<int64_t>(c.max_delay_ms * 1000);
  // A batched model: every dims leaves out the batch's, which max_batch_size bounds; "seeds" is one
  // number an image ([1] with a reshape to a scalar, as Triton writes a [N] input of a batched model).
  return "{\"name\": " + json::quote(c.name) + ", \"platform\": \"facegen\", \"backend\": \"facegen\", "
         "\"version_policy\": {\"specific\": {\"versions\": [1]}}, \"max_batch_size\": " +
         std::to_string(kMaxRequestImages) +
         ", \"input\": [{\"name\": \"latents\", \"data_type\": \"TYPE_FP32\", \"format\": \"FORMAT_NONE\", \"dims\": [" +
         std::to_string(c.spec.latent_dim) + "], \"optional\": true}, {\"name\": \"seeds\", \"data_type\": \"TYPE_UINT64\", "
         "\"format\": \"FORMAT_NONE\", \"dims\": [1], \"reshape\": {\"shape\": []}, \"optional\": true}], "
         "\"output\": [{\"name\": \"images\", \"data_type\": \"TYPE_UINT8\", \"dims\": [" +
         std::to_string(c.spec.image_size) + ", " + std::to_string(c.spec.image_size) + ", 3]}], "
         "\"instance_group\": [{\"name\": " + json::quote(c.name) + ", \"kind\": \"" + kind + "\", \"count\": " +
         std::to_string(c.workers) + "}], \"dynamic_batching\": {\"preferred_batch_size\": [" + std::to_string(c.max_batch) +
         "], \"max_queue_delay_microseconds\": " + std::to_string(delay_us) + "}}\n";
}

bool parse_repository_index(const std::string& body) {
  if (body.find_first_not_of(" \t\r\n") == std::string::npos) return false;
  json::Value root;
  try {
    root = json::parse(body);
  } catch (const json::ParseError& e) {
    bad(e.what());
  }
  if (!root.is(Kind::Object)) bad(std::string("the index request must be a JSON object, got ") + json::kind_name(root.kind));
  only_members(root, "the index request", "ready");
  const json::Value* ready = root.find("ready");
  if (ready == nullptr) return false;
  if (!ready->is(Kind::Bool)) bad(std::string("\"ready\" must be true or false, got ") + json::kind_name(ready->kind));
  return ready->boolean;
}

std::string oip_repository_index(const std::vector<std::string>& names, const std::string& state) {
  std::string out = "[";
  for (size_t k = 0; k < names.size(); ++k) {
    out += std::string(k ? ", " : "") + "{\"name\": " + json::quote(names[k]) + ", \"version\": \"" + kOipModelVersion +
           "\", \"state\": \"" + state + "\", \"reason\": \"\"}";
  }
  return out + "]\n";
}

InferRequest parse_infer(const std::string& body, const std::string& json_length, int nz) {
  const size_t header = json_part_length(json_length, body.size());
  json::Value root;
  try {
    root = json::parse(body.substr(0, header));
  } catch (const json::ParseError& e) {
    bad(e.what());
  }
  if (!root.is(Kind::Object)) bad(std::string("the inference request must be a JSON object, got ") + json::kind_name(root.kind));
  only_members(root, "the inference request", "id parameters inputs outputs");
  InferRequest request;
  if (const json::Value* id = root.find("id")) {
    if (!id->is(Kind::String)) bad(std::string("\"id\" must be a string, got ") + json::kind_name(id->kind));
    request.id = id->text;
    request.has_id = true;
  }
  request.binary_output = binary_output(root);
  const json::Value* inputs = root.find("inputs");
  if (inputs == nullptr) bad("the inference request has no \"inputs\"; give one: " + input_kinds(nz));
  request.images = read_input(*inputs, nz, body.data() + header, body.size() - header, !json_length.empty());
  return request;
}

}  // namespace facegen::serve
