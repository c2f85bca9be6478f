// test_network.cpp: the network.bin layout, loading and validation messages, saving, random weights, and
// a model file whose path changes between its open and the end of its load.
//
// Offsets are checked against numbers worked out by hand from the layout in network.hpp, not against
// a second copy of the offset code. Files are written under a fresh mkdtemp directory.
#include <doctest/doctest.h>

#include <stdlib.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "common/text_format.hpp"
#include "generator/network.hpp"
#include "generator/safetensors_model.hpp"
#include "tests/test_support.hpp"

using namespace facegen;
using namespace facegen_test;

namespace {

uint64_t fnv1a(const void* data, size_t bytes) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

double stddev_of(const float* values, int64_t n) {
  double sum = 0, sum_sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    sum += values[i];
    sum_sq += double{values[i]} * values[i];
  }
  const double mean = sum / n;
  return std::sqrt(sum_sq / n - mean * mean);
}

}  // namespace

TEST_CASE("network layout: block offsets follow the file order and sum to 5,137,283 floats") {
  CHECK(kNetworkFloats == 5137283);
  const Network shpc;
  CHECK(shpc.spec() == kShpcSpec);
  CHECK(Network::float_count(kShpcSpec) == kNetworkFloats);
  CHECK(kNetworkBytes == 20549132);
  CHECK(shpc.proj_weight_offset() == 0);
  CHECK(shpc.proj_bias_offset() == 819200);  // 100 * 8192
  // Per stage: bn (4 * c_in), tconv weight (25 * c_out * c_in), tconv bias (c_out).
  const int64_t bn[4] = {827392, 4106496, 4926848, 5132224};
  const int64_t weight[4] = {829440, 4107520, 4927360, 5132480};
  const int64_t bias[4] = {4106240, 4926720, 5132160, 5137280};
  for (int s = 0; s < kNumStages; ++s) {
    CAPTURE(s);
    CHECK(shpc.batchnorm_offset(s) == bn[s]);
    CHECK(shpc.tconv_weight_offset(s) == weight[s]);
    CHECK(shpc.tconv_bias_offset(s) == bias[s]);
  }
  CHECK(shpc.tconv_bias_offset(3) + 3 == kNetworkFloats);

  // The block sizes of network.hpp, added up independently of the offset functions.
  int64_t total = 100 * 8192 + 8192;
  const int channels[5] = {512, 256, 128, 64, 3};
  for (int s = 0; s < 4; ++s) total += 4 * channels[s] + 25 * channels[s + 1] * channels[s] + channels[s + 1];
  CHECK(total == 5137283);

  Network net;
  REQUIRE(static_cast<int64_t>(net.floats().size()) == kNetworkFloats);
  const float* base = net.floats().data();
  CHECK(net.proj_weight() == base);
  CHECK(net.proj_bias() == base + 819200);
  const BatchNormView bn1 = net.batchnorm(1);
  CHECK(bn1.channels == 256);
  CHECK(bn1.beta == base + 4106496);
  CHECK(bn1.gamma == base + 4106496 + 256);
  CHECK(bn1.mean == base + 4106496 + 512);
  CHECK(bn1.var == base + 4106496 + 768);
  const TConvView t3 = net.tconv(3);
  CHECK(t3.weight == base + 5132480);
  CHECK(t3.bias == base + 5137280);
  CHECK(t3.c_in == 64);
  CHECK(t3.c_out == 3);
  CHECK(t3.size_in == 32);
  CHECK(net.tconv(0).size_in == 4);
  CHECK_THROWS(net.batchnorm(4));
  CHECK_THROWS(net.tconv(-1));
  CHECK_THROWS_AS(Network(kShpcSpec, std::vector<float>(10)), std::invalid_argument);
  CHECK(t3.kernel_size == 5);
}

TEST_CASE("network: save then load gives the same bytes, and the file is the raw float32 array") {
  TempDir dir;
  const Network net = make_random_network(7);
  const std::string path = dir.file("net.bin");
  save_network(net, path);
  const std::string bytes = read_file(path);
  REQUIRE(bytes.size() == static_cast<size_t>(kNetworkBytes));
  CHECK(std::memcmp(bytes.data(), net.floats().data(), bytes.size()) == 0);

  const Network loaded = load_network(path);
  CHECK(std::memcmp(loaded.floats().data(), net.floats().data(), bytes.size()) == 0);
  // Only the final file remains in the directory.
  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path)) entries += entry.is_regular_file();
  CHECK(entries == 1);
}

TEST_CASE("network: a file of the wrong size names both byte counts") {
  TempDir dir;
  const std::string path = dir.file("short.bin");
  std::vector<char> bytes(1000, 0);
  write_file(path, bytes.data(), bytes.size());
  std::string message = user_error_of([&] { load_network(path); });
  CHECK(contains(message, path));
  CHECK(contains(message, "1,000 bytes"));
  CHECK(contains(message, "20,549,132 bytes"));

  bytes.assign(static_cast<size_t>(kNetworkBytes) + 1, 0);
  write_file(path, bytes.data(), bytes.size());
  message = user_error_of([&] { load_network(path); });
  CHECK(contains(message, "20,549,133 bytes"));
  CHECK(contains(message, "expected 20,549,132 bytes"));

  write_file(path, "", 0);
  message = user_error_of([&] { load_network(path); });
  CHECK(contains(message, "has 0 bytes"));
}

TEST_CASE("network: a missing file or a directory is a clear error") {
  TempDir dir;
  const std::string missing = dir.file("nope.bin");
  std::string message = user_error_of([&] { load_network(missing); });
  CHECK(contains(message, "cannot open model file " + missing));
  CHECK(contains(message, "No such file or directory"));

  message = user_error_of([&] { load_network(dir.path); });
  CHECK(contains(message, "is a directory"));
}

TEST_CASE("network: NaN and Inf are located by block and index") {
  TempDir dir;
  const std::string path = dir.file("bad.bin");
  Network net;  // all zeros: valid, and quick to make for every subcase
  std::vector<float>& f = net.mutable_floats();

  SUBCASE("NaN in tconv2 weight, through the file") {
    f[net.tconv_weight_offset(1) + 1234] = std::numeric_limits<float>::quiet_NaN();
    save_network(net, path);
    const std::string message = user_error_of([&] { load_network(path); });
    CHECK(contains(message, path));
    CHECK(contains(message, "tconv2 weight[1234]"));
    CHECK(contains(message, "NaN"));
  }
  SUBCASE("+Inf in proj bias") {
    f[net.proj_bias_offset() + 5] = std::numeric_limits<float>::infinity();
    const std::string message = user_error_of([&] { validate_network(net, "model.bin"); });
    CHECK(contains(message, "model.bin"));
    CHECK(contains(message, "proj bias[5]"));
    CHECK(contains(message, "+Inf"));
  }
  SUBCASE("-Inf in bn3 gamma, the first value of its block") {
    f[net.batchnorm_offset(3) + 64] = -std::numeric_limits<float>::infinity();
    const std::string message = user_error_of([&] { validate_network(net, "model.bin"); });
    CHECK(contains(message, "bn3 gamma[0]"));
    CHECK(contains(message, "-Inf"));
  }
  SUBCASE("NaN in the very last float: tconv4 bias[2]") {
    f[kNetworkFloats - 1] = std::nanf("");
    const std::string message = user_error_of([&] { validate_network(net, "model.bin"); });
    CHECK(contains(message, "tconv4 bias[2]"));
  }
  SUBCASE("NaN in the very first float: proj weight[0]") {
    f[0] = std::nanf("");
    CHECK(contains(user_error_of([&] { validate_network(net, "m"); }), "proj weight[0]"));
  }
}

TEST_CASE("network: a batch-norm variance with var + 1e-5 <= 0 is named with its value") {
  Network net;
  float* var1 = net.mutable_floats().data() + net.batchnorm_offset(1) + 3 * 256;

  var1[17] = -0.25f;
  std::string message = user_error_of([&] { validate_network(net, "model.bin"); });
  CHECK(contains(message, "bn1 var[17]"));
  CHECK(contains(message, "-0.25"));

  var1[17] = -1e-5f;  // var + eps == 0 exactly
  message = user_error_of([&] { validate_network(net, "model.bin"); });
  CHECK(contains(message, "bn1 var[17]"));

  var1[17] = -0.5e-5f;  // small negative, but var + eps > 0: allowed
  CHECK_NOTHROW(validate_network(net, "model.bin"));
  var1[17] = 0.0f;
  CHECK_NOTHROW(validate_network(net, "model.bin"));
}

TEST_CASE("network: random weights are deterministic per seed, differ across seeds, and have sane scales") {
  const Network a = make_random_network(5);
  const Network b = make_random_network(5);
  const Network c = make_random_network(6);
  const size_t bytes = static_cast<size_t>(kNetworkBytes);
  CHECK(std::memcmp(a.floats().data(), b.floats().data(), bytes) == 0);
  CHECK(std::memcmp(a.floats().data(), c.floats().data(), bytes) != 0);
  CHECK_NOTHROW(validate_network(a, "random"));

  // The bytes of seed 1 (the default model) are pinned: a change to the generator shows up here.
  const Network one = make_random_network(1);
  CHECK(fnv1a(one.floats().data(), bytes) == 0x575331f52b05708bull);

  // Scales as documented in network.cpp.
  CHECK(stddev_of(a.proj_weight(), 100 * 8192) == doctest::Approx(0.1).epsilon(0.02));
  for (int s = 0; s < kNumStages; ++s) {
    CAPTURE(s);
    const BatchNormView bn = a.batchnorm(s);
    for (int ch = 0; ch < bn.channels; ++ch) {
      REQUIRE(bn.var[ch] >= 0.8f);
      REQUIRE(bn.var[ch] <= 1.2f);
      REQUIRE(bn.gamma[ch] >= 0.8f);
      REQUIRE(bn.gamma[ch] <= 1.2f);
    }
    const TConvView t = a.tconv(s);
    const double expected = (s == 3 ? 0.6 : 1.0) * std::sqrt(2.0 / (6.25 * t.c_in));
    CHECK(stddev_of(t.weight, int64_t{25} * t.c_in * t.c_out) == doctest::Approx(expected).epsilon(0.05));
  }
}

TEST_CASE("network layout: any ModelSpec, offsets worked out by hand for the PyTorch tutorial generator") {
  // nz 100, ngf 32, nc 1, 4x4 kernels, no biases: C = 256, 128, 64, 32, 1.
  const ModelSpec tutorial{100, 32, 1, 4, false};
  const Network net(tutorial);
  CHECK(net.spec() == tutorial);
  CHECK(net.proj_bias_offset() == 409600);  // 100 * 4096
  // Per stage: bn (4 * c_in), tconv weight (16 * c_out * c_in), bias (c_out), zeros but present.
  const int64_t bn[4] = {413696, 939136, 1070784, 1103840};
  const int64_t weight[4] = {414720, 939648, 1071040, 1103968};
  const int64_t bias[4] = {939008, 1070720, 1103808, 1104480};
  for (int s = 0; s < kNumStages; ++s) {
    CAPTURE(s);
    CHECK(net.batchnorm_offset(s) == bn[s]);
    CHECK(net.tconv_weight_offset(s) == weight[s]);
    CHECK(net.tconv_bias_offset(s) == bias[s]);
    CHECK(net.tconv(s).kernel_size == 4);
    CHECK(net.tconv(s).size_in == (4 << s));
  }
  CHECK(Network::float_count(tutorial) == 1104481);
  CHECK(static_cast<int64_t>(net.floats().size()) == Network::float_count(tutorial));
  CHECK(net.tconv(3).c_out == 1);
  CHECK(net.batchnorm(0).channels == 256);
  CHECK_THROWS_AS(Network(tutorial, std::vector<float>(5137283)), std::invalid_argument);
}

TEST_CASE("network: specs outside the supported ranges are refused in words") {
  CHECK(model_spec_problem(kShpcSpec).empty());
  CHECK(model_spec_problem({1024, 256, 1, 4, false}).empty());
  CHECK(model_spec_problem({0, 64, 3, 5, true}) == "nz is 0, but it must be 1 to 1024");
  CHECK(model_spec_problem({1025, 64, 3, 5, true}) == "nz is 1025, but it must be 1 to 1024");
  CHECK(model_spec_problem({100, 24, 3, 5, true}) ==
        "ngf is 24, but it must be a multiple of 16 from 16 to 256");
  CHECK(model_spec_problem({100, 272, 3, 5, true}) ==
        "ngf is 272, but it must be a multiple of 16 from 16 to 256");
  CHECK(model_spec_problem({100, 64, 2, 5, true}) == "nc is 2, but it must be 1 (grey) or 3 (RGB)");
  CHECK(model_spec_problem({100, 64, 3, 3, true}) == "kernel_size is 3, but it must be 4 or 5");
  CHECK_THROWS_AS(Network(ModelSpec{100, 64, 3, 3, true}), std::invalid_argument);
  CHECK(describe_spec({128, 32, 1, 4, false}) == "nz 128, ngf 32, nc 1, 4x4 kernels, no biases, 64x64 images");
}

TEST_CASE("network: random weights of any spec validate; no biases means zero biases; network.bin is SHPC only") {
  const ModelSpec spec{37, 16, 1, 4, false};
  const Network a = make_random_network(spec, 3);
  const Network b = make_random_network(spec, 3);
  CHECK(a.floats() == b.floats());
  CHECK_NOTHROW(validate_network(a, "random"));
  for (int o = 0; o < spec.proj_outputs(); ++o) REQUIRE(a.proj_bias()[o] == 0.0f);
  for (int s = 0; s < kNumStages; ++s) {
    const TConvView t = a.tconv(s);
    for (int o = 0; o < t.c_out; ++o) REQUIRE(t.bias[o] == 0.0f);
    // He's rule for k x k: variance 2 / (k^2 / 4 * c_in), the last stage scaled by 0.6.
    const double expected = (s == 3 ? 0.6 : 1.0) * std::sqrt(2.0 / (4.0 * t.c_in));
    CHECK(stddev_of(t.weight, int64_t{16} * t.c_in * t.c_out) == doctest::Approx(expected).epsilon(0.1));
  }
  TempDir dir;
  CHECK_THROWS_AS(save_network(a, dir.file("x.bin")), std::invalid_argument);
  CHECK(!std::filesystem::exists(dir.file("x.bin")));
}

TEST_CASE("network: a model file changing between its open and its load: the opened file, or one sentence") {
  TempDir dir;
  const ModelSpec small{100, 16, 1, 4, false};  // the PyTorch tutorial's generator, grey, narrow
  struct Format {
    std::string name;
    Network net;
    std::string bytes, twin;
  };
  Network shpc = make_random_network(3), small_net = make_random_network(small, 4);
  std::string shpc_bytes(reinterpret_cast<const char*>(shpc.floats().data()), static_cast<size_t>(kNetworkBytes));
  const Network shpc_twin = make_random_network(5);
  const Format formats[] = {
      {"m.bin", shpc, shpc_bytes,
       std::string(reinterpret_cast<const char*>(shpc_twin.floats().data()), static_cast<size_t>(kNetworkBytes))},
      {"m.safetensors", small_net, safetensors_bytes(small_net), safetensors_bytes(make_random_network(small, 6))}};
  for (const Format& format : formats) {
    REQUIRE(format.twin.size() == format.bytes.size());
    const std::string path = dir.file(format.name);
    const std::string size = with_commas(static_cast<int64_t>(format.bytes.size()));
    for (FileChange change : {FileChange::Deleted, FileChange::RenamedOver, FileChange::Truncated, FileChange::Grown,
                              FileChange::Rewritten}) {
      CAPTURE(format.name);
      CAPTURE(change_name(change));
      write_file(path, format.bytes);
      const InputFile file(path, InputKind::Model);
      CHECK(read_model_spec(file) == format.net.spec());  // read before the change, as an MPI rank does
      change_file(path, change, format.twin, format.bytes.size() / 2);
      if (!changes_opened_file(change)) {
        const Network loaded = load_network(file);
        CHECK(loaded.floats() == format.net.floats());
        continue;
      }
      const std::string how =
          change == FileChange::Rewritten ? size + " bytes when opened and now, but rewritten in place: its modification time moved 1.000 s"
          : change == FileChange::Truncated ? size + " bytes when opened, " + with_commas(static_cast<int64_t>(format.bytes.size() / 2)) + " now"
                                            : size + " bytes when opened, " + with_commas(static_cast<int64_t>(format.bytes.size()) + 5) + " now";
      CHECK(user_error_of([&] { load_network(file); }) == "model file " + path + " changed while it was read (" + how + ")");
    }
  }
}
