// fuzz_safetensors.cpp: libFuzzer target for the safetensors model loader
// (parse_safetensors_network in generator/safetensors_model.cpp).
//
// The low bit of byte 0 chooses how the rest of the input is read:
//   0: the whole file (any bytes: the header length, the JSON, the offsets, truncation). No input a
//      fuzzer makes is large enough to hold a whole generator, so each must be refused.
//   1: the JSON header of a file whose data is that of a valid model, the next bits of byte 0 (mod 3)
//      choosing which (seeded random weights): 0 the tutorial generator (nz 100, ngf 16, nc 1, no
//      biases, 64x64), 1 a 32x32 one (nz 37, ngf 16, nc 3, 5x5 kernels, biases), 2 a 128x128 one (nz 100,
//      ngf 16, nc 1): the fuzzer edits names, shapes, dtypes, offsets and metadata (the image size among
//      them) against real data. A header equal (as JSON) to the model's own must load, to the very
//      floats of the model; any other may load or be refused.
// Acceptable outcomes: a loaded network, or a UserError. Any other exception, crash, leak or
// undefined behaviour is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "common/errors.hpp"
#include "generator/network.hpp"
#include "generator/safetensors_model.hpp"

namespace {

constexpr facegen::ModelSpec kFixtureSpecs[] = {
    {100, 16, 1, 4, false}, {37, 16, 3, 5, true, 32}, {100, 16, 1, 4, false, 128}};
constexpr int kFixtures = sizeof kFixtureSpecs / sizeof kFixtureSpecs[0];

struct Fixture {
  facegen::Network net;
  nlohmann::json header;
  std::string data;
  explicit Fixture(const facegen::ModelSpec& spec) : net(facegen::make_random_network(spec, 5)) {
    const std::string bytes = facegen::safetensors_bytes(net);
    uint64_t length = 0;
    for (int i = 7; i >= 0; --i) length = length << 8 | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
    header = nlohmann::json::parse(bytes.substr(8, length));
    data = bytes.substr(8 + length);
  }
};

Fixture& fixture(int which) {
  static Fixture* f[kFixtures] = {};  // each lives for the whole run; never freed, so no leak report
  if (!f[which]) f[which] = new Fixture(kFixtureSpecs[which]);
  return *f[which];
}

// Parses `bytes`; returns whether it loaded (into *net). Only a UserError may come out.
bool load(const std::string& bytes, facegen::Network* net) {
  try {
    *net = facegen::parse_safetensors_network(bytes, "fuzz.safetensors");
    return true;
  } catch (const facegen::UserError& e) {
    if (std::strlen(e.what()) == 0) std::abort();
    return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  facegen::Network net;
  if ((data[0] & 1) == 0) {
    if (load(rest, &net)) std::abort();  // too small to be a whole generator
    return 0;
  }
  Fixture& f = fixture((data[0] >> 1) % kFixtures);
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = static_cast<char>((uint64_t{rest.size()} >> (8 * i)) & 0xff);
  file += rest;
  file += f.data;
  const bool loaded = load(file, &net);
  const nlohmann::json parsed = nlohmann::json::parse(rest, nullptr, /*allow_exceptions=*/false);
  if (parsed == f.header) {
    if (!loaded || net.floats() != f.net.floats()) {
      std::fprintf(stderr, "the model's own header %s\n", loaded ? "loaded other floats" : "was refused");
      std::abort();
    }
  }
  if (loaded) facegen::validate_network(net, "fuzz.safetensors");  // a loaded model is a valid one
  return 0;
}
