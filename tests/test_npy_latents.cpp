// test_npy_latents.cpp: .npy latent files: float32 and float64 read bit for bit (float64 rounded as a
// cast rounds), any range of images, and one sentence naming the file, what was expected and what
// was found for every kind of bad file.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "common/model_shape.hpp"
#include "latents/latent_source.hpp"
#include "tests/test_support.hpp"

using namespace facegen;
using namespace facegen_test;

namespace {

// A .npy file as NumPy writes it: magic, version, header length, dict padded to 64 bytes, then data.
std::string npy_bytes(const std::string& dict, const std::string& data, int major = 1) {
  std::string header = dict;
  const size_t preamble = major == 1 ? 10 : 12;
  while ((preamble + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = std::string("\x93NUMPY", 6) + static_cast<char>(major) + '\0';
  const size_t length = header.size();
  out += static_cast<char>(length & 0xff);
  out += static_cast<char>((length >> 8) & 0xff);
  if (major != 1) out += std::string(2, '\0');
  return out + header + data;
}

std::string dict(const std::string& descr, const std::string& shape, const std::string& order = "False") {
  return "{'descr': '" + descr + "', 'fortran_order': " + order + ", 'shape': " + shape + ", }";
}

template <class T>
std::string raw(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

std::string open_error(const std::string& path) {
  return user_error_of([&] {
    std::unique_ptr<LatentSource> source = open_latent_file(path);
    std::vector<float> all(static_cast<size_t>(source->count()) * kLatentDim);
    source->read(all.data(), source->count());
  });
}

}  // namespace

TEST_CASE("npy latents: float32 and float64, (N, nz) or (N, nz, 1, 1), any range, versions 1 and 2, found by content") {
  TempDir dir;
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal;
  const int64_t n = 37;
  std::vector<double> wide(static_cast<size_t>(n) * kLatentDim);
  for (double& v : wide) v = normal(rng) * (rng() % 10 == 0 ? 1e-40 : 1.0);
  std::vector<float> narrow(wide.begin(), wide.end());
  write_file(dir.file("f4.npy"), npy_bytes(dict("<f4", "(37, 100)"), raw(narrow)));
  write_file(dir.file("f8.data"), npy_bytes(dict("<f8", "(37,100)"), raw(wide), 2));  // no .npy name
  // torch.randn(N, nz, 1, 1) saved with numpy: the same bytes as (N, nz).
  write_file(dir.file("nchw.npy"), npy_bytes(dict("<f4", "(37, 100, 1, 1)"), raw(narrow)));
  for (const std::string name : {"f4.npy", "f8.data", "nchw.npy"}) {
    std::unique_ptr<LatentSource> source = open_latent_file(dir.file(name));
    REQUIRE(source->count() == n);
    CHECK(source->random_access());
    std::vector<float> got(narrow.size(), std::nanf(""));  // poisoned
    source->read(got.data(), 5);
    source->read(got.data() + 5 * kLatentDim, n);
    source->finish();
    CHECK(std::memcmp(got.data(), narrow.data(), got.size() * sizeof(float)) == 0);
    std::vector<float> slice(3 * kLatentDim, std::nanf(""));
    source->read_range(30, 3, slice.data());
    CHECK(std::memcmp(slice.data(), narrow.data() + 30 * kLatentDim, slice.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("npy latents: every bad file is refused in one sentence with what was expected and found") {
  TempDir dir;
  const std::vector<float> one(kLatentDim, 0.5f);
  const std::vector<float> two(2 * kLatentDim, 0.5f);
  const std::string path = dir.file("bad.npy");
  struct Case {
    std::string bytes;
    std::string message;
  };
  std::vector<float> with_nan = two;
  with_nan[150] = std::nanf("");
  std::vector<double> too_large(kLatentDim, 1.0);
  too_large[7] = 1e300;
  std::vector<float> with_inf = one;
  with_inf[99] = -std::numeric_limits<float>::infinity();
  const std::vector<Case> cases = {
      {npy_bytes(dict("<i4", "(1, 100)"), raw(one)), "but its dtype is '<i4'"},
      {npy_bytes(dict(">f4", "(1, 100)"), raw(one)), "float32 or float64, little-endian ('<f4' or '<f8'), but its dtype is '>f4'"},
      {npy_bytes(dict("<f4", "(2, 50)"), raw(one)), "must have shape (N, 100) or (N, 100, 1, 1) with N >= 1, but its shape is (2, 50)"},
      {npy_bytes(dict("<f4", "(1, 100, 1, 2)"), raw(two)), "but its shape is (1, 100, 1, 2)"},
      {npy_bytes(dict("<f4", "(1, 100, 1, 1, 1)"), raw(one)), "but its shape is (1, 100, 1, 1, 1)"},
      {npy_bytes(dict("<f4", "(100,)"), raw(one)), "but its shape is (100,)"},
      {npy_bytes(dict("<f4", "(0, 100)"), ""), "but its shape is (0, 100)"},
      {npy_bytes(dict("<f4", "(1, 100, 1)"), raw(one)), "but its shape is (1, 100, 1)"},
      {npy_bytes(dict("<f4", "(1, 100)", "True"), raw(one)), "must be in C order, but this one is in Fortran order"},
      {npy_bytes(dict("<f4", "(2, 100)"), raw(one)), "shape (2, 100) of float32 needs 928 bytes (a 128-byte header and 800 bytes of data), but the file has 528 bytes (truncated)"},
      {npy_bytes(dict("<f4", "(1, 100)"), raw(two)), "shape (1, 100) of float32 needs 528 bytes (a 128-byte header and 400 bytes of data), but the file has 928 bytes"},
      {npy_bytes(dict("<f4", "(2, 100)"), raw(with_nan)), "bad.npy: image 2 of 2, value 51 of 100 is NaN; latents must be finite numbers"},
      {npy_bytes(dict("<f4", "(1, 100)"), raw(with_inf)), "image 1 of 1, value 100 of 100 is infinite"},
      {npy_bytes(dict("<f8", "(1, 100)"), raw(too_large)), "image 1 of 1, value 8 of 100 is too large for a float"},
      {npy_bytes("{'shape': (1, 100)}", raw(one)), "its .npy header is not a dict with 'descr', 'fortran_order' and 'shape'"},
      {npy_bytes(dict("<f4", "(1, 100)"), raw(one), 4), "its .npy format version is 4.0; versions 1.0, 2.0 and 3.0 are read"},
      {"1\n" + std::string(200, '1'), "bad.npy: it is not a NumPy .npy file: a .npy file starts with the magic"},
      {std::string("\x93NUMPY\x01\x00\xff\xff", 10), "its .npy header claims 65,535 bytes, but the file has 10 bytes in all"},
      {std::string("\x93NUM", 4), "it has 4 bytes; a .npy file starts with the magic"},
  };
  for (const Case& c : cases) {
    write_file(path, c.bytes);
    const std::string message = open_error(path);
    INFO("expected: " << c.message);
    CHECK(contains(message, c.message));
    CHECK(message.rfind(path + ": ", 0) == 0);
    CHECK(message.find('\n') == std::string::npos);
  }
}

TEST_CASE("latents of any nz: .npy (N, nz), text N x nz, each refusing the SHPC width in words") {
  TempDir dir;
  std::mt19937_64 rng(12);
  std::normal_distribution<float> normal;
  const int nz = 7;
  const int64_t n = 5;
  std::vector<float> values(static_cast<size_t>(n) * nz);
  for (float& v : values) v = normal(rng);
  write_file(dir.file("z.npy"), npy_bytes(dict("<f4", "(5, 7)"), raw(values)));
  std::string text = "5\n";
  for (size_t i = 0; i < values.size(); ++i) {
    char token[32];
    std::snprintf(token, sizeof token, "%a%c", static_cast<double>(values[i]), i % nz == nz - 1 ? '\n' : ' ');
    text += token;
  }
  write_file(dir.file("z.txt"), text);
  for (const std::string name : {"z.npy", "z.txt"}) {
    CAPTURE(name);
    LatentSpec spec;
    spec.path = dir.file(name);
    spec.latent_dim = nz;
    std::unique_ptr<LatentSource> source = open_latents(spec);
    REQUIRE(source->count() == n);
    std::vector<float> got(values.size() + nz, std::nanf(""));  // poisoned, one image too many
    CHECK(source->read(got.data(), 2) == 2);
    CHECK(source->read(got.data() + 2 * nz, n) == 3);
    source->finish();
    CHECK(std::memcmp(got.data(), values.data(), values.size() * sizeof(float)) == 0);
    CHECK(std::isnan(got[values.size()]));
    std::vector<float> slice(2 * nz, std::nanf(""));
    source->read_range(3, 2, slice.data());
    CHECK(std::memcmp(slice.data(), values.data() + 3 * nz, slice.size() * sizeof(float)) == 0);
  }
  // The same files for a model of nz 100.
  CHECK(contains(open_error(dir.file("z.npy")), "must have shape (N, 100) or (N, 100, 1, 1) with N >= 1, but its shape is (5, 7)"));
  CHECK(contains(open_error(dir.file("z.txt")), "the image count N = 5 needs 500 numbers"));
  // And the file of nz 7 for a model of nz 3: numbers left over.
  LatentSpec spec;
  spec.path = dir.file("z.txt");
  spec.latent_dim = 3;
  const std::string message = user_error_of([&] {
    std::unique_ptr<LatentSource> source = open_latents(spec);
    std::vector<float> all(static_cast<size_t>(source->count()) * 3);
    source->read(all.data(), source->count());
    source->finish();
  });
  CHECK(contains(message, "after the 15 numbers that N = 5 calls for (N x 3)"));
}
