// test_model_files.cpp: safetensors model files: the round trip of every kind of spec, the SHPC network
// against its network.bin, telling the formats apart, and one sentence for each kind of bad file.
//
// Files are made by safetensors_bytes and then broken by editing their JSON header (nlohmann) or
// their bytes; tests/model_files.py checks the same files against PyTorch and the Python exporter.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "common/errors.hpp"
#include "generator/network.hpp"
#include "generator/safetensors_model.hpp"
#include "tests/test_support.hpp"

using namespace facegen;
using namespace facegen_test;
using nlohmann::json;

namespace {

const ModelSpec kTutorialGrey{100, 16, 1, 4, false};  // small enough to make in every subcase

struct Parts {
  json header;
  std::string data;
};

Parts split(const std::string& bytes) {
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = length << 8 | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  return {json::parse(bytes.substr(8, length)), bytes.substr(8 + length)};
}

std::string join(const Parts& parts) {
  const std::string text = parts.header.dump();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((uint64_t{text.size()} >> (8 * i)) & 0xff);
  return out + text + parts.data;
}

// The message of parsing the tutorial file after `edit` changed it.
std::string error_after(const std::function<void(Parts&)>& edit) {
  Parts parts = split(safetensors_bytes(make_random_network(kTutorialGrey, 3)));
  edit(parts);
  const std::string bytes = join(parts);
  return user_error_of([&] { parse_safetensors_network(bytes, "m.safetensors"); });
}

// Sets a float of the data at byte `offset` of tensor `key`.
void poke(Parts& parts, const std::string& key, int64_t index, float value) {
  const uint64_t begin = parts.header[key]["data_offsets"][0].get<uint64_t>();
  std::memcpy(parts.data.data() + begin + 4 * index, &value, sizeof value);
}

// Takes tensor `key` out of the file: its header entry and its bytes, the later offsets moved down.
void remove_tensor(Parts& parts, const std::string& key) {
  const uint64_t begin = parts.header[key]["data_offsets"][0].get<uint64_t>();
  const uint64_t end = parts.header[key]["data_offsets"][1].get<uint64_t>();
  parts.data.erase(begin, end - begin);
  parts.header.erase(key);
  for (auto& item : parts.header.items()) {
    if (item.key() == "__metadata__") continue;
    json& offsets = item.value()["data_offsets"];
    if (offsets[0].get<uint64_t>() >= end) offsets = json::array({offsets[0].get<uint64_t>() - (end - begin),
                                                                  offsets[1].get<uint64_t>() - (end - begin)});
  }
}

}  // namespace

TEST_CASE("safetensors: every kind of spec survives the round trip bit for bit") {
  for (const ModelSpec& spec : {kTutorialGrey, ModelSpec{7, 32, 3, 4, true}, ModelSpec{100, 16, 3, 5, true},
                                ModelSpec{1, 16, 1, 5, false}, ModelSpec{9, 48, 3, 4, false, 32},
                                ModelSpec{5, 16, 1, 4, true, 128}, ModelSpec{3, 32, 3, 5, true, 32}}) {
    CAPTURE(describe_spec(spec));
    const Network net = make_random_network(spec, 9);
    const std::string bytes = safetensors_bytes(net);
    CHECK(bytes.size() % 4 == 0);
    const Network back = parse_safetensors_network(bytes, "m.safetensors");
    CHECK(back.spec() == spec);
    REQUIRE(back.floats().size() == net.floats().size());
    if (spec.has_bias && spec.kernel_size == 4) {
      // The tutorial's first layer has one bias per channel: make_random_network draws one per value.
      continue;
    }
    CHECK(std::memcmp(back.floats().data(), net.floats().data(), net.floats().size() * 4) == 0);
  }
}

TEST_CASE("safetensors: the image size is the metadata's, 64 without it, and the layers must be its own") {
  const ModelSpec small{9, 16, 3, 4, false, 32};
  Parts parts = split(safetensors_bytes(make_random_network(small, 4)));
  CHECK(parts.header["__metadata__"]["image_size"] == "32");
  CHECK(parse_safetensors_network(join(parts), "m").spec().stages() == 3);

  // A file of the 64x64 family without image_size (as every file was before the other sizes) is 64x64.
  Parts old = split(safetensors_bytes(make_random_network(kTutorialGrey, 3)));
  old.header["__metadata__"].erase("image_size");
  CHECK(parse_safetensors_network(join(old), "m").spec() == kTutorialGrey);

  // The metadata's size and the tensors disagree: one sentence names the first tensor that differs.
  CHECK(error_after([](Parts& p) { p.header["__metadata__"]["image_size"] = "32"; }) ==
        "model file m.safetensors: tensor 'main.0.weight' has shape (100, 128, 4, 4), but the generator of nz 100, "
        "ngf 16, nc 1, 4x4 kernels, no biases, 32x32 images has (100, 64, 4, 4)");
  CHECK(error_after([](Parts& p) { p.header["__metadata__"]["image_size"] = "128"; }) ==
        "model file m.safetensors: tensor 'main.0.weight' has shape (100, 128, 4, 4), but the generator of nz 100, "
        "ngf 16, nc 1, 4x4 kernels, no biases, 128x128 images has (100, 256, 4, 4)");
  CHECK(error_after([](Parts& p) { p.header["__metadata__"]["image_size"] = "48"; }) ==
        "model file m.safetensors: __metadata__ image_size is 48, but it must be 32, 64 or 128");
  CHECK(error_after([](Parts& p) { p.header["__metadata__"]["image_size"] = "sixty"; }) ==
        "model file m.safetensors: __metadata__ image_size is \"sixty\", but it must be a whole number");
  // A layer the size does not have: the 64x64 file with a fifth transposed convolution.
  CHECK(contains(error_after([](Parts& p) {
                   const uint64_t end = p.data.size();
                   p.data.append(16 * 16 * 4, '\0');
                   p.header["main.15.weight"] = {{"dtype", "F32"}, {"shape", {16, 1, 4, 4}}, {"data_offsets", {end, end + 16 * 16 * 4}}};
                 }),
                 "it has a tensor 'main.15.weight' that the generator of nz 100, ngf 16, nc 1, 4x4 kernels, no biases, "
                 "64x64 images does not have"));
}

TEST_CASE("safetensors: a first layer wider than 2048 channels is refused, with the largest ngf of its size") {
  Parts parts = split(safetensors_bytes(make_random_network(ModelSpec{4, 16, 1, 4, false, 128}, 2)));
  parts.header["__metadata__"]["ngf"] = "256";
  CHECK(user_error_of([&] { parse_safetensors_network(join(parts), "m"); }) ==
        "model file m: __metadata__ ngf is 256, but a 128x128 generator's first layer then has 4096 channels, more "
        "than 2048: ngf must be at most 128 at this size");
}

TEST_CASE("safetensors: a dcgan bias is one per channel, the same at each of the 16 projection pixels") {
  const ModelSpec spec{7, 32, 3, 4, true};
  const Network back = parse_safetensors_network(safetensors_bytes(make_random_network(spec, 9)), "m");
  const float* bias = back.proj_bias();
  const int c0 = spec.stage_channels(0);
  for (int p = 1; p < 16; ++p)
    for (int o = 0; o < c0; ++o) REQUIRE(bias[p * c0 + o] == bias[o]);
}

TEST_CASE("safetensors: the SHPC network in PyTorch's layout, written and read, is the network.bin") {
  TempDir dir;
  const Network net = make_random_network(1);
  const std::string bytes = safetensors_bytes(net);
  const Parts parts = split(bytes);
  CHECK(parts.header["__metadata__"]["architecture"] == "shpc");
  CHECK(parts.header["main.0.weight"]["shape"] == json::array({100, 512, 4, 4}));
  CHECK(parts.header["main.0.bias"]["shape"] == json::array({512, 4, 4}));
  CHECK(parts.header["main.3.weight"]["shape"] == json::array({512, 256, 5, 5}));
  CHECK(parts.header["main.12.bias"]["shape"] == json::array({3}));
  // PyTorch's main.3.weight[c][o][kh][kw] is the network.bin's tconv1 weight[kh][kw][o][c].
  const uint64_t begin = parts.header["main.3.weight"]["data_offsets"][0].get<uint64_t>();
  float torch_value;
  const int c = 17, o = 5, kh = 3, kw = 1;
  std::memcpy(&torch_value, parts.data.data() + begin + 4 * (((c * 256 + o) * 5 + kh) * 5 + kw), 4);
  CHECK(torch_value == net.tconv(0).weight[((kh * 5 + kw) * 256 + o) * 512 + c]);

  write_file(dir.file("m.safetensors"), bytes);
  write_file(dir.file("no-extension"), bytes);  // found by its content
  save_network(net, dir.file("m.bin"));
  for (const char* name : {"m.safetensors", "no-extension", "m.bin"}) {
    CAPTURE(name);
    CHECK(read_model_spec(dir.file(name)) == kShpcSpec);
    const Network loaded = load_network(dir.file(name));
    CHECK(loaded.floats() == net.floats());
  }
  const std::string tutorial = safetensors_bytes(make_random_network(kTutorialGrey, 4));
  write_file(dir.file("t.safetensors"), tutorial);
  CHECK(read_model_spec(dir.file("t.safetensors")) == kTutorialGrey);
  // A network.bin named .safetensors is read as safetensors and refused as one.
  std::filesystem::copy_file(dir.file("m.bin"), dir.file("bin.safetensors"));
  CHECK(contains(user_error_of([&] { load_network(dir.file("bin.safetensors")); }), "its header length is"));
}

TEST_CASE("safetensors: a file too short or whose header length lies is refused before any JSON is read") {
  const std::string good = safetensors_bytes(make_random_network(kTutorialGrey, 3));
  CHECK(user_error_of([&] { parse_safetensors_network(good.substr(0, 5), "m"); }) ==
        "model file m: it has 5 bytes, too few for a safetensors file (an 8-byte header length, then the header)");
  std::string lying = good;
  lying[0] = static_cast<char>(0xff);
  lying[1] = static_cast<char>(0xff);
  lying[2] = static_cast<char>(0x7f);  // 8,388,607 bytes of header in a smaller file
  CHECK(contains(user_error_of([&] { parse_safetensors_network(lying, "m"); }),
                 "its header length is 8,388,607 bytes, but only"));
  lying[4] = 1;  // beyond 100 MB
  CHECK(contains(user_error_of([&] { parse_safetensors_network(lying, "m"); }),
                 "more than the 100,000,000 a safetensors header may have"));
  const std::string broken = std::string("\x06\0\0\0\0\0\0\0", 8) + "{\"a\": ";
  CHECK(contains(user_error_of([&] { parse_safetensors_network(broken, "m"); }), "its header is not valid JSON"));
}

TEST_CASE("safetensors: bad JSON structure, offsets and coverage each get one sentence") {
  CHECK(contains(error_after([](Parts& p) { p.header = json::array({1, 2}); }),
                 "its header is [1,2], but it must be a JSON object of tensors"));
  CHECK(contains(error_after([](Parts& p) { p.header["main.3.weight"] = 5; }),
                 "tensor 'main.3.weight' must be an object with dtype, shape and data_offsets, but it is 5"));
  CHECK(contains(error_after([](Parts& p) { p.header["main.3.weight"].erase("shape"); }),
                 "tensor 'main.3.weight' must have dtype, shape and data_offsets"));
  CHECK(contains(error_after([](Parts& p) { p.header["main.3.weight"]["dtype"] = "F33"; }),
                 "tensor 'main.3.weight' has dtype \"F33\", which is not a safetensors dtype"));
  CHECK(contains(error_after([](Parts& p) { p.header["main.3.weight"]["shape"] = json::array({-1, 2}); }),
                 "tensor 'main.3.weight' has shape [-1,2], but sizes are whole numbers from 0 to 2^40"));
  CHECK(contains(error_after([](Parts& p) { p.header["main.3.weight"]["data_offsets"] = json::array({5}); }),
                 "has data_offsets [5], but they are two whole numbers [begin, end]"));
  CHECK(contains(error_after([](Parts& p) {
                   auto& o = p.header["main.3.weight"]["data_offsets"];
                   o = json::array({o[1], o[0]});
                 }),
                 "which end before they begin"));
  CHECK(contains(error_after([](Parts& p) { p.header["main.3.weight"]["data_offsets"][1] = p.header["main.3.weight"]["data_offsets"][1].get<uint64_t>() + 4; }),
                 "needs 524,288 bytes, but its data_offsets"));
  // Two tensors at the same bytes: an overlap, and the bytes of the one moved belong to no tensor.
  const std::string overlap = error_after([](Parts& p) {
    p.header["main.1.bias"]["data_offsets"] = p.header["main.1.weight"]["data_offsets"];
  });
  CHECK((contains(overlap, "tensors 'main.1.bias' and 'main.1.weight' overlap") ||
         contains(overlap, "tensors 'main.1.weight' and 'main.1.bias' overlap")));
  CHECK(contains(error_after([](Parts& p) { p.data += "abcd"; }), "but the tensors end at byte"));
  CHECK(contains(error_after([](Parts& p) { p.data.resize(p.data.size() - 4); }),
                 "bytes of data (a truncated file?)"));
  const std::string gap = error_after([](Parts& p) { p.header.erase("main.3.weight"); });
  CHECK(contains(gap, "of the data belong to no tensor"));
}

TEST_CASE("safetensors: metadata that is missing or wrong is named") {
  CHECK(contains(error_after([](Parts& p) { p.header.erase("__metadata__"); }),
                 "its header has no __metadata__ architecture saying which generator it holds"));
  CHECK(contains(error_after([](Parts& p) { p.header["__metadata__"]["architecture"] = "wgan"; }),
                 "__metadata__ architecture is \"wgan\", but it must be \"dcgan\" or \"shpc\""));
  CHECK(contains(error_after([](Parts& p) { p.header["__metadata__"]["nz"] = "1e2"; }),
                 "__metadata__ nz is \"1e2\", but it must be a whole number"));
  CHECK(contains(error_after([](Parts& p) { p.header["__metadata__"]["nz"] = 100; }),
                 "__metadata__ nz is 100, but metadata values are strings"));
  CHECK(contains(error_after([](Parts& p) { p.header["__metadata__"].erase("ngf"); }), "its __metadata__ has no ngf"));
  CHECK(contains(error_after([](Parts& p) { p.header["__metadata__"]["kernel_size"] = "5"; }),
                 "__metadata__ kernel_size is 5, but architecture dcgan has 4x4 kernels"));
  CHECK(contains(error_after([](Parts& p) { p.header["__metadata__"]["bias"] = "yes"; }),
                 "__metadata__ bias is \"yes\", but it must be \"true\" or \"false\""));
  CHECK(contains(error_after([](Parts& p) { p.header["__metadata__"]["nc"] = "2"; }),
                 "__metadata__ nc is 2, but it must be 1 (grey) or 3 (RGB)"));
  CHECK(contains(error_after([](Parts& p) { p.header["__metadata__"] = "dcgan"; }),
                 "its __metadata__ is \"dcgan\", but it must be an object of strings"));
}

TEST_CASE("safetensors: missing, extra, mistyped and misshapen tensors are named with what was expected") {
  CHECK(error_after([](Parts& p) { remove_tensor(p, "main.4.running_var"); }) ==
        "model file m.safetensors: it has no tensor 'main.4.running_var', (64) float32 in the generator of nz 100, "
        "ngf 16, nc 1, 4x4 kernels, no biases, 64x64 images");
  CHECK(contains(error_after([](Parts& p) {
                   p.header["main.0.bias"] = {{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {0, 0}}};
                 }),
                 "it has a tensor 'main.0.bias' that the generator of nz 100, ngf 16, nc 1, 4x4 kernels, no biases, "
                 "64x64 images does not have (its __metadata__ bias is \"false\")"));
  CHECK(contains(error_after([](Parts& p) { p.header["main.3.weight"]["dtype"] = "I32"; }),
                 "tensor 'main.3.weight' has dtype I32, but the generator's tensors are float32 (F32)"));
  CHECK(contains(error_after([](Parts& p) { p.header["main.3.weight"]["shape"] = json::array({64, 128, 4, 4}); }),
                 "tensor 'main.3.weight' has shape (64, 128, 4, 4), but the generator of nz 100, ngf 16, nc 1, 4x4 "
                 "kernels, no biases, 64x64 images has (128, 64, 4, 4)"));
  CHECK(contains(error_after([](Parts& p) { p.header["__metadata__"]["nz"] = "50"; }),
                 "tensor 'main.0.weight' has shape (100, 128, 4, 4), but the generator of nz 50"));
  CHECK(contains(error_after([](Parts& p) {
                   p.header["main.4.num_batches_tracked"] = {{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {0, 0}}};
                 }),
                 "tensor 'main.4.num_batches_tracked' is F32 (0), but a batch norm's num_batches_tracked is an int64 "
                 "scalar (I64, shape ())"));
}

TEST_CASE("safetensors: NaN, Inf and a variance with var + 1e-5 <= 0 are named by tensor and element") {
  CHECK(error_after([](Parts& p) { poke(p, "main.3.weight", 1 * 64 * 16 + 2 * 16 + 3 * 4 + 1, std::nanf("")); }) ==
        "model file m.safetensors: tensor 'main.3.weight' element [1, 2, 3, 1] is NaN");
  CHECK(contains(error_after([](Parts& p) { poke(p, "main.0.weight", 0, -INFINITY); }),
                 "tensor 'main.0.weight' element [0, 0, 0, 0] is -Inf"));
  CHECK(error_after([](Parts& p) { poke(p, "main.7.running_var", 5, -0.25f); }) ==
        "model file m.safetensors: tensor 'main.7.running_var' element [5] is -0.25, but a batch-norm variance plus "
        "1e-5 must be positive");
  // A variance just above -1e-5 is allowed, as in network.bin.
  Parts parts = split(safetensors_bytes(make_random_network(kTutorialGrey, 3)));
  poke(parts, "main.7.running_var", 5, -0.5e-5f);
  CHECK_NOTHROW(parse_safetensors_network(join(parts), "m"));
}
