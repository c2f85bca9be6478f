// test_latent_source.cpp: random and interpolated latents are pure functions of (seed, image); a latent
// file (text or .npy) is read through the descriptor it was opened with, whatever happens to its path.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/text_format.hpp"
#include "latents/latent_source.hpp"
#include "generator/network.hpp"
#include "tests/test_support.hpp"

using namespace facegen;
using namespace facegen_test;

namespace {

std::vector<float> read_in_chunks(LatentSource& source, int64_t chunk) {
  std::vector<float> all(static_cast<size_t>(source.count()) * kLatentDim, NAN);
  int64_t done = 0;
  while (done < source.count()) {
    const int64_t got = source.read(all.data() + done * kLatentDim, chunk);
    REQUIRE(got > 0);
    done += got;
  }
  CHECK(source.read(all.data(), chunk) == 0);
  source.finish();
  return all;
}

}  // namespace

TEST_CASE("random latents do not depend on chunking, and a slice equals the same images of the whole") {
  auto whole = make_random_latents(37, 11);
  const std::vector<float> expected = read_in_chunks(*whole, 37);
  for (int64_t chunk : {1, 3, 16}) {
    auto source = make_random_latents(37, 11);
    CHECK(read_in_chunks(*source, chunk) == expected);
  }
  auto slice = make_random_latents(5, 11, 30);  // images 30..34
  const std::vector<float> part = read_in_chunks(*slice, 2);
  CHECK(std::equal(part.begin(), part.end(), expected.begin() + 30 * kLatentDim));
  auto other_seed = make_random_latents(37, 12);
  CHECK(read_in_chunks(*other_seed, 37) != expected);
}

TEST_CASE("random latents look standard normal") {
  auto source = make_random_latents(200, 3);
  const std::vector<float> values = read_in_chunks(*source, 64);
  double sum = 0, squares = 0;
  for (float v : values) {
    REQUIRE(std::isfinite(v));
    sum += v;
    squares += static_cast<double>(v) * v;
  }
  const double n = static_cast<double>(values.size());
  CHECK(std::abs(sum / n) < 0.03);                 // 20,000 draws: the mean's sd is 0.007
  CHECK(std::abs(squares / n - 1.0) < 0.05);       // the variance's sd is 0.01
}

TEST_CASE("interpolation rows start and end at random latents 2r and 2r + 1") {
  const int64_t side = 4;
  auto grid = make_interpolation_latents(side, 9);
  CHECK(grid->count() == side * side);
  const std::vector<float> values = read_in_chunks(*grid, 5);
  for (int64_t row = 0; row < side; ++row) {
    for (int v = 0; v < kLatentDim; ++v) {
      CHECK(values[(row * side) * kLatentDim + v] == doctest::Approx(random_latent_value(9, 2 * row, v)).epsilon(1e-5));
      CHECK(values[(row * side + side - 1) * kLatentDim + v] ==
            doctest::Approx(random_latent_value(9, 2 * row + 1, v)).epsilon(1e-5));
    }
    // Midpoints keep a Gaussian latent's typical norm (about 10), unlike a straight line's.
    double norm = 0;
    for (int v = 0; v < kLatentDim; ++v) norm += std::pow(values[(row * side + 1) * kLatentDim + v], 2);
    CHECK(std::sqrt(norm) > 7.0);
  }
}

TEST_CASE("random and interpolated latents of any nz: value v of an image does not depend on nz") {
  for (int nz : {1, 7, 128}) {
    CAPTURE(nz);
    LatentSpec spec;
    spec.random_count = 9;
    spec.seed = 5;
    spec.latent_dim = nz;
    auto source = open_latents(spec);
    std::vector<float> values(static_cast<size_t>(9 * nz) + 1, NAN);
    CHECK(source->read(values.data(), 9) == 9);
    CHECK(std::isnan(values.back()));
    for (int image = 0; image < 9; ++image)
      for (int v = 0; v < nz; ++v)
        REQUIRE(values[static_cast<size_t>(image * nz + v)] == static_cast<float>(random_latent_value(5, image, v)));
    spec.random_count = 0;
    spec.interpolate_side = 3;
    auto grid = open_latents(spec);
    std::vector<float> row(static_cast<size_t>(9 * nz), NAN);
    grid->read(row.data(), 9);
    // Each row starts at random latent 2r.
    for (int v = 0; v < nz; ++v) {
      REQUIRE(row[static_cast<size_t>(v)] == static_cast<float>(random_latent_value(5, 0, v)));
      REQUIRE(row[static_cast<size_t>(3 * nz + v)] == static_cast<float>(random_latent_value(5, 2, v)));
    }
  }
}

namespace {

// A float32 .npy file of shape (n, 100).
std::string npy_file(const std::vector<float>& values) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                       std::to_string(values.size() / kLatentDim) + ", 100), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = std::string("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

}  // namespace

TEST_CASE("latent files changing while read: deleted or renamed over, the opened file; changed in place, one sentence") {
  TempDir dir;
  std::mt19937_64 rng(41);
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  const int64_t n = 40;
  // Text: fixed-point tokens (the expected values are strtof's of them); its twin has every digit 1-8
  // one higher after N, so that it is as long and its tokens sit at the same offsets.
  std::string text = std::to_string(n) + "\n";
  std::vector<float> from_text;
  for (int64_t i = 0; i < n * kLatentDim; ++i) {
    char token[32];
    std::snprintf(token, sizeof token, "%.6f", static_cast<double>(uniform(rng)));
    from_text.push_back(std::strtof(token, nullptr));
    text += std::string(token) + (i % kLatentDim == kLatentDim - 1 ? "\n" : " ");
  }
  std::string text_twin = text;
  for (size_t i = text.find('\n'); i < text_twin.size(); ++i)
    if (text_twin[i] >= '1' && text_twin[i] <= '8') ++text_twin[i];
  // A cut in the second half right after a '-': the reader once saw the "-" as a token of its own.
  const size_t text_cut = text.find('-', text.size() / 2) + 1;
  std::vector<float> from_npy(static_cast<size_t>(n) * kLatentDim), npy_twin_values(from_npy.size());
  for (size_t i = 0; i < from_npy.size(); ++i) {
    from_npy[i] = uniform(rng);
    npy_twin_values[i] = from_npy[i] + 1.0f;
  }
  struct Format {
    std::string name;
    std::string bytes, twin;
    size_t cut;
    const std::vector<float>* values;
  };
  const Format formats[] = {{"in.txt", text, text_twin, text_cut, &from_text},
                            {"in.npy", npy_file(from_npy), npy_file(npy_twin_values), npy_file(from_npy).size() / 2, &from_npy}};
  const FileChange changes[] = {FileChange::Deleted, FileChange::RenamedOver, FileChange::Truncated, FileChange::Grown,
                                FileChange::Rewritten};
  for (const Format& format : formats) {
    const std::string path = dir.file(format.name);
    const std::string size = with_commas(static_cast<int64_t>(format.bytes.size()));
    for (int read_first : {0, 7}) {  // images read before the change
      for (FileChange change : changes) {
        for (int threads : {1, 3}) {
          CAPTURE(format.name);
          CAPTURE(read_first);
          CAPTURE(change_name(change));
          CAPTURE(threads);
          write_file(path, format.bytes);
          std::unique_ptr<LatentSource> source = open_latent_file(path);
          source->set_threads(threads);
          std::vector<float> got(static_cast<size_t>(n) * kLatentDim, NAN);  // poisoned
          REQUIRE(source->read(got.data(), read_first) == read_first);
          change_file(path, change, format.twin, format.cut);
          auto read_rest = [&] {
            for (int64_t done = read_first; done < n;) done += source->read(got.data() + done * kLatentDim, 9);
            source->finish();
          };
          if (!changes_opened_file(change)) {
            read_rest();
            CHECK(std::memcmp(got.data(), format.values->data(), got.size() * sizeof(float)) == 0);
            continue;
          }
          const std::string message = user_error_of(read_rest);
          const std::string now = change == FileChange::Truncated ? with_commas(static_cast<int64_t>(format.cut))
                                                                  : with_commas(static_cast<int64_t>(format.bytes.size()) + 5);
          const std::string how = change == FileChange::Rewritten
                                      ? size + " bytes when opened and now, but rewritten in place: its modification time moved 1.000 s"
                                      : size + " bytes when opened, " + now + " now";
          CHECK(message == "latent file " + path + " changed while it was read (" + how + ")");
        }
      }
    }
  }
}
