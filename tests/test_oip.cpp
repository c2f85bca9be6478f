// test_oip.cpp: the Open Inference Protocol's request reading and answer making (serve/oip.hpp):
// latents and seeds as JSON (flat and nested) and as binary data give the same latents as the
// service's own API; every kind of bad tensor (name, datatype, shape, size, data, JSON, the binary
// part's length) is refused with 400 and one sentence; the answer's pixels are channel_to_byte of the
// images, as JSON numbers or as the bytes after the JSON.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "formats/image_run.hpp"
#include "latents/latent_source.hpp"
#include "formats/output_format.hpp"
#include "serve/json.hpp"
#include "serve/oip.hpp"

using namespace facegen;
using namespace facegen::serve;

namespace {

constexpr int kNz = 4;

std::string infer_error(const std::string& body, const std::string& json_length = "") {
  try {
    parse_infer(body, json_length, kNz);
  } catch (const RequestError& e) {
    CHECK(e.status == 400);
    CHECK(std::string(e.what()).find('\n') == std::string::npos);
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string latents_input(const std::string& shape, const std::string& data, const std::string& datatype = "FP32") {
  return R"({"inputs": [{"name": "latents", "datatype": ")" + datatype + R"(", "shape": )" + shape + R"(, "data": )" + data + "}]}";
}

}  // namespace

TEST_CASE("oip: latents as flat or nested JSON, or as binary, are the same floats") {
  const InferRequest flat = parse_infer(latents_input("[2, 4]", "[0.5, -1, 2e-3, 7, 1, 2, 3, 4]"), "", kNz);
  const InferRequest nested = parse_infer(latents_input("[2, 4]", "[[0.5, -1, 2e-3, 7], [1, 2, 3, 4]]"), "", kNz);
  CHECK(flat.images.count == 2);
  CHECK(flat.images.seeds.empty());
  CHECK(flat.images.latents == nested.images.latents);
  CHECK(flat.images.latents[2] == 2e-3f);
  std::string json = R"({"id": "x", "inputs": [{"name": "latents", "datatype": "FP32", "shape": [2, 4], "parameters": {"binary_data_size": 32}}]})";
  std::string body = json + std::string(reinterpret_cast<const char*>(flat.images.latents.data()), 32);
  const InferRequest binary = parse_infer(body, std::to_string(json.size()), kNz);
  CHECK(binary.images.latents == flat.images.latents);
  CHECK(binary.has_id);
  CHECK(binary.id == "x");
}

TEST_CASE("oip: seeds as JSON or binary give each seed's latent") {
  const InferRequest json = parse_infer(R"({"inputs": [{"name": "seeds", "datatype": "UINT64", "shape": [3], "data": [7, 0, 18446744073709551615]}]})", "", kNz);
  REQUIRE(json.images.count == 3);
  CHECK(json.images.seeds[2] == 18446744073709551615ull);
  float want[kNz];
  seed_latent(7, kNz, want);
  CHECK(std::memcmp(json.images.latents.data(), want, sizeof want) == 0);
  const std::string head = R"({"inputs": [{"name": "seeds", "datatype": "UINT64", "shape": [3], "parameters": {"binary_data_size": 24}}]})";
  const uint64_t seeds[3] = {7, 0, 18446744073709551615ull};
  const InferRequest binary = parse_infer(head + std::string(reinterpret_cast<const char*>(seeds), 24), std::to_string(head.size()), kNz);
  CHECK(binary.images.seeds == json.images.seeds);
  CHECK(binary.images.latents == json.images.latents);
}

TEST_CASE("oip: the output as binary where asked, by the output or by the request") {
  const std::string input = R"("inputs": [{"name": "seeds", "datatype": "UINT64", "shape": [1], "data": [1]}])";
  CHECK(!parse_infer("{" + input + "}", "", kNz).binary_output);
  CHECK(parse_infer(R"({"parameters": {"binary_data_output": true}, )" + input + "}", "", kNz).binary_output);
  CHECK(parse_infer(R"({"outputs": [{"name": "images", "parameters": {"binary_data": true}}], )" + input + "}", "", kNz).binary_output);
  CHECK(!parse_infer(R"({"parameters": {"binary_data_output": true}, "outputs": [{"name": "images", "parameters": {"binary_data": false}}], )" + input + "}", "", kNz).binary_output);
}

TEST_CASE("oip: every kind of bad tensor is refused with 400 and one sentence") {
  CHECK(has(infer_error("{\"inputs\": [1"), "malformed at byte"));
  CHECK(has(infer_error("[]"), "must be a JSON object"));
  CHECK(has(infer_error("{}"), "no \"inputs\""));
  CHECK(has(infer_error(R"({"inputs": []})"), "one input"));
  CHECK(has(infer_error(R"({"inputs": [], "extra": 1})"), "unknown member \"extra\""));
  CHECK(has(infer_error(R"({"inputs": [{"name": "z", "datatype": "FP32", "shape": [1, 4], "data": [1,2,3,4]}]})"), "unknown input \"z\""));
  CHECK(has(infer_error(latents_input("[1, 4]", "[1,2,3,4]", "FP64")), "datatype FP32"));
  CHECK(has(infer_error(latents_input("[1, 4]", "[1,2,3,4]", "fp32")), "datatype FP32"));
  CHECK(has(infer_error(R"({"inputs": [{"name": "seeds", "datatype": "INT64", "shape": [1], "data": [1]}]})"), "datatype UINT64"));
  CHECK(has(infer_error(latents_input("[1, 5]", "[1,2,3,4,5]")), "shape [N, 4]"));
  CHECK(has(infer_error(latents_input("[4]", "[1,2,3,4]")), "shape [N, 4]"));
  CHECK(has(infer_error(latents_input("[1, 4, 1]", "[1,2,3,4]")), "shape [N, 4]"));
  CHECK(has(infer_error(latents_input("[-1, 4]", "[1,2,3,4]")), "whole number"));
  CHECK(has(infer_error(latents_input("[0, 4]", "[]")), "from 1 to 4096"));
  CHECK(has(infer_error(latents_input("[4097, 4]", "[]")), "from 1 to 4096"));
  CHECK(has(infer_error(latents_input("[2, 4]", "[1,2,3,4]")), "needs 8"));
  CHECK(has(infer_error(latents_input("[1, 4]", "[1,2,3,4,5]")), "needs 4"));
  CHECK(has(infer_error(latents_input("[2, 4]", "[[1,2,3,4],[1,2,3]]")), "dimension 1"));
  CHECK(has(infer_error(latents_input("[1, 4]", "[[[1],2,3,4]]")), "deeper"));
  CHECK(has(infer_error(latents_input("[1, 4]", "[1,2,3,\"4\"]")), "must be a number"));
  CHECK(has(infer_error(latents_input("[1, 4]", "[1,2,3,1e39]")), "finite"));
  CHECK(has(infer_error(latents_input("[1, 4]", "{}")), "must be an array"));
  CHECK(has(infer_error(R"({"inputs": [{"name": "seeds", "datatype": "UINT64", "shape": [1], "data": [-1]}]})"), "whole number from 0"));
  CHECK(has(infer_error(R"({"inputs": [{"name": "seeds", "datatype": "UINT64", "shape": [1], "data": [1.5]}]})"), "whole number from 0"));
  CHECK(has(infer_error(R"({"inputs": [{"name": "seeds", "datatype": "UINT64", "shape": [1]}]})"), "either as \"data\""));
  CHECK(has(infer_error(R"({"inputs": [{"name": "seeds", "datatype": "UINT64", "shape": [1], "data": [1], "extra": 2}]})"), "unknown member"));
  CHECK(has(infer_error(R"({"inputs": [{"name": "seeds", "datatype": "UINT64", "shape": [1], "data": [1]}], "outputs": [{"name": "x"}]})"), "unknown output"));
  CHECK(has(infer_error(R"({"inputs": [{"name": "seeds", "datatype": "UINT64", "shape": [1], "data": [1]}], "outputs": [{"name": "images", "parameters": {"classification": 3}}]})"), "classification"));
  CHECK(has(infer_error(R"({"id": 5, "inputs": []})"), "\"id\" must be a string"));
  CHECK(has(infer_error(R"({"parameters": {"binary_data_output": 1}, "inputs": [{"name": "seeds", "datatype": "UINT64", "shape": [1], "data": [1]}]})"), "true or false"));
}

TEST_CASE("oip: the binary part must be exactly what the input says") {
  const std::string head = R"({"inputs": [{"name": "seeds", "datatype": "UINT64", "shape": [2], "parameters": {"binary_data_size": 16}}]})";
  const std::string sixteen(16, '\x01');
  CHECK(has(infer_error(head + sixteen), "malformed"));  // no length field: the whole body is JSON
  CHECK(has(infer_error(head, ""), "no Inference-Header-Content-Length"));
  CHECK(has(infer_error(head + sixteen.substr(0, 15), std::to_string(head.size())), "holds 15 bytes"));
  CHECK(has(infer_error(head + sixteen + "x", std::to_string(head.size())), "holds 17 bytes"));
  CHECK(has(infer_error(head + sixteen, "999999"), "no larger than the body"));
  CHECK(has(infer_error(head + sixteen, "+12"), "decimal number"));
  const std::string wrong = R"({"inputs": [{"name": "seeds", "datatype": "UINT64", "shape": [2], "parameters": {"binary_data_size": 15}}]})";
  CHECK(has(infer_error(wrong + sixteen.substr(0, 15), std::to_string(wrong.size())), "need 16 bytes"));
  const std::string both = R"({"inputs": [{"name": "seeds", "datatype": "UINT64", "shape": [2], "data": [1, 2], "parameters": {"binary_data_size": 16}}]})";
  CHECK(has(infer_error(both + sixteen, std::to_string(both.size())), "one of the two"));
  const std::string json_only = R"({"inputs": [{"name": "seeds", "datatype": "UINT64", "shape": [2], "data": [1, 2]}]})";
  CHECK(has(infer_error(json_only + sixteen, std::to_string(json_only.size())), "bytes after its JSON"));
  const float nan = std::nanf("");
  const std::string latents = R"({"inputs": [{"name": "latents", "datatype": "FP32", "shape": [1, 4], "parameters": {"binary_data_size": 16}}]})";
  std::string values(16, '\0');
  std::memcpy(&values[8], &nan, 4);
  CHECK(has(infer_error(latents + values, std::to_string(latents.size())), "not a finite float"));
}

TEST_CASE("oip: the answer holds channel_to_byte of each value, as JSON or as bytes after the JSON") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> value(-1.2f, 1.2f);
  for (const auto& [channels, size] : {std::pair{3, 64}, std::pair{1, 64}, std::pair{3, 32}, std::pair{1, 128}}) {
    ModelSpec spec = kTutorialSpec;
    spec.image_channels = channels;
    spec.image_size = size;
    const int pixels = size * size;
    const int64_t rgb_bytes = rgb8_image_bytes(size);
    InferRequest request;
    request.images.count = 3;
    request.id = "a\"b";
    request.has_id = true;
    std::vector<float> images(static_cast<size_t>(3 * pixels * channels));
    for (float& v : images) v = value(rng);
    std::string want(static_cast<size_t>(3 * rgb_bytes), '\0');
    for (int k = 0; k < 3; ++k) {
      for (int p = 0; p < pixels; ++p) {
        for (int c = 0; c < 3; ++c) want[static_cast<size_t>(k * rgb_bytes + p * 3 + c)] = static_cast<char>(channel_to_byte(images[static_cast<size_t>((k * pixels + p) * channels + (channels == 3 ? c : 0))]));
      }
    }
    const InferAnswer as_json = encode_infer(request, images.data(), spec, "fashion \"2\"");
    CHECK(as_json.json_length.empty());
    const json::Value root = json::parse(as_json.body);
    CHECK(root.find("id")->text == "a\"b");
    CHECK(root.find("model_name")->text == "fashion \"2\"");
    const json::Value& output = root.find("outputs")->items.at(0);
    CHECK(output.find("datatype")->text == "UINT8");
    REQUIRE(output.find("shape")->items.size() == 4);
    CHECK(output.find("shape")->items[1].text == std::to_string(size));
    CHECK(output.find("shape")->items[2].text == std::to_string(size));
    const auto& data = output.find("data")->items;
    REQUIRE(data.size() == want.size());
    size_t wrong = 0;
    for (size_t k = 0; k < data.size(); ++k) wrong += std::stoi(data[k].text) != static_cast<unsigned char>(want[k]);
    CHECK(wrong == 0);
    request.binary_output = true;
    const InferAnswer as_binary = encode_infer(request, images.data(), spec, "faces");
    const size_t head = std::stoul(as_binary.json_length);
    CHECK(as_binary.body.substr(head) == want);
    const json::Value binary_root = json::parse(as_binary.body.substr(0, head));
    CHECK(binary_root.find("outputs")->items.at(0).find("parameters")->find("binary_data_size")->text == std::to_string(want.size()));
  }
}

TEST_CASE("oip: the metadata is JSON naming the inputs and output") {
  ModelSpec spec;
  spec.latent_dim = 100;
  const json::Value model = json::parse(oip_model_metadata("faces", spec));
  CHECK(model.find("name")->text == "faces");
  CHECK(model.find("inputs")->items.at(0).find("shape")->items.at(1).text == "100");
  std::vector<std::string> extensions;
  const json::Value server = json::parse(oip_server_metadata("abc"));
  for (const json::Value& item : server.find("extensions")->items) extensions.push_back(item.text);
  CHECK(extensions == std::vector<std::string>{"binary_tensor_data", "model_configuration", "statistics"});
}

TEST_CASE("oip: Triton's model configuration of a batched model, the repository index and its request") {
  for (const int nz : {100, 7}) {
    ModelSpec spec;
    spec.latent_dim = nz;
    const json::Value config = json::parse(oip_model_config({"fashion", spec, 64, 2.5, true, 3}));
    CAPTURE(nz);
    CHECK(config.find("name")->text == "fashion");
    CHECK(config.find("max_batch_size")->text == std::to_string(kMaxRequestImages));
    const json::Value& latents = config.find("input")->items.at(0);
    CHECK(latents.find("data_type")->text == "TYPE_FP32");
    REQUIRE(latents.find("dims")->items.size() == 1);  // the batch's dimension left out
    CHECK(latents.find("dims")->items.at(0).text == std::to_string(nz));
    CHECK(config.find("input")->items.at(1).find("data_type")->text == "TYPE_UINT64");
    const json::Value& images = config.find("output")->items.at(0);
    CHECK(images.find("data_type")->text == "TYPE_UINT8");
    CHECK(images.find("dims")->items.size() == 3);
    const json::Value& group = config.find("instance_group")->items.at(0);
    CHECK((group.find("kind")->text == "KIND_GPU" && group.find("count")->text == "3"));
    CHECK(config.find("dynamic_batching")->find("max_queue_delay_microseconds")->text == "2500");
  }
  const json::Value index = json::parse(oip_repository_index({"faces", "fashion"}, "READY"));
  REQUIRE(index.items.size() == 2);
  CHECK((index.items[1].find("name")->text == "fashion" && index.items[1].find("version")->text == "1" &&
         index.items[1].find("state")->text == "READY"));
  CHECK(json::parse(oip_repository_index({}, "READY")).items.empty());
  CHECK(!parse_repository_index(""));
  CHECK(!parse_repository_index(" {} "));
  CHECK(parse_repository_index("{\"ready\": true}"));
  CHECK(!parse_repository_index("{\"ready\": false}"));
  for (const char* bad : {"[]", "{\"ready\": 1}", "{\"readiness\": true}", "{"}) {
    CAPTURE(bad);
    bool refused = false;
    try {
      parse_repository_index(bad);
    } catch (const RequestError& e) {
      refused = e.status == 400;
    }
    CHECK(refused);
  }
}
