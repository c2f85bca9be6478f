// test_latent_source.cpp: random and interpolated latents are pure functions of (seed, image).
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "files/latent_source.hpp"
#include "generator/network.hpp"

using namespace facegen;

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
