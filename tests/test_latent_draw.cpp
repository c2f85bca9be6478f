// test_latent_draw.cpp: the drawn latents (common/latent_draw.hpp) and what makes them elsewhere.
//
// The GPU's Box-Muller is modelled on the CPU as glibc's log and cos moved by up to CUDA's documented
// errors (1 and 2 ulp), the other steps as the kernel does them (recipe_float, draw_uncertain); the
// values it marks uncertain are made again on the host, and the result must equal the host's bit for
// bit for every source. Draws built to land next to a float rounding edge show that the detector
// catches every value whose float a few ulp of log and cos could change. --truncation's values lie in
// [-T, T], do not depend on how a run is split, and a T past every draw gives the untruncated values.
#include <doctest/doctest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "common/latent_draw.hpp"
#include "latents/latent_source.hpp"
#include "latents/seed_list.hpp"

using namespace facegen;

namespace {

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// x moved by `steps` doubles (negative: down).
double step_by(double x, int steps) {
  for (; steps > 0; --steps) x = std::nextafter(x, HUGE_VAL);
  for (; steps < 0; ++steps) x = std::nextafter(x, -HUGE_VAL);
  return x;
}

// The GPU's Box-Muller as the tests model it: glibc's log and cos moved by log_steps and cos_steps
// doubles (fixed), or, with `spread`, by a step in [-1, 1] and [-2, 2] picked from the arguments' bits;
// sqrt and the products correctly rounded, and draw_uncertain's doubt, as in kernels/latent_draw.cuh.
struct ModelGpuBoxMuller {
  int log_steps = 0, cos_steps = 0;
  bool spread = true;
  double agreement = kDrawAgreement;
  bool uncertain = false;

  double operator()(double u1, double u2) {
    int ls = log_steps, cs = cos_steps;
    if (spread) {
      uint64_t bits1, bits2;
      std::memcpy(&bits1, &u1, sizeof bits1);
      std::memcpy(&bits2, &u2, sizeof bits2);
      const uint64_t h = mix64(bits1 ^ mix64(bits2));
      ls = static_cast<int>(h % 3) - 1;
      cs = static_cast<int>((h >> 8) % 5) - 2;
    }
    const double z = std::sqrt(-2.0 * step_by(std::log(u1), ls)) * step_by(std::cos(kBoxMullerTurn * u2), cs);
    uncertain = uncertain || draw_uncertain(u1, z, agreement);
    return z;
  }
};

// Job image `image`'s value `value` as the GPU path makes it: the model's float, or the host's where
// the model was unsure. *uncertain counts the latter.
float gpu_path_value(const LatentRecipe& recipe, int64_t image, int value, int64_t* uncertain) {
  ModelGpuBoxMuller box_muller;
  const float f = recipe_float(recipe, image, value, box_muller);
  if (!box_muller.uncertain) return f;
  ++*uncertain;
  return recipe_value(recipe, image, value);
}

std::vector<float> read_all(LatentSource& source, int64_t first, int64_t count, int nz) {
  std::vector<float> out(static_cast<size_t>(count * nz), NAN);
  source.read_range(first, count, out.data());
  return out;
}

std::shared_ptr<const SeedList> seeds_of(const char* text) {
  return std::make_shared<const SeedList>(SeedList::parse(text));
}

}  // namespace

TEST_CASE("latent draw: the modelled GPU path gives the host's floats for every source, truncated or not") {
  int64_t uncertain = 0, values = 0;
  for (double truncation : {0.0, 0.3, 1.0, 2.5}) {
    CAPTURE(truncation);
    for (uint64_t seed : {uint64_t{0}, uint64_t{1}, uint64_t{977}, ~uint64_t{0}}) {
      CAPTURE(seed);
      const int nz = 100;
      auto random = make_random_latents(700, seed, 3, nz, truncation);
      auto listed = make_seed_latents(seeds_of("5-300,18446744073709551615,7,7"), nz, truncation);
      for (LatentSource* source : {random.get(), listed.get()}) {
        REQUIRE(source->drawn());
        const int64_t first = 11, count = std::min<int64_t>(source->count() - first, 500);
        std::vector<uint64_t> seeds(static_cast<size_t>(count));
        const LatentRecipe recipe = source->recipe(first, count, seeds.data());
        const std::vector<float> host = read_all(*source, first, count, nz);
        for (int64_t i = 0; i < count; ++i) {
          for (int v = 0; v < nz; ++v) {
            ++values;
            REQUIRE(same_bits(recipe_value(recipe, i, v), host[static_cast<size_t>(i * nz + v)]));
            REQUIRE(same_bits(gpu_path_value(recipe, i, v, &uncertain), host[static_cast<size_t>(i * nz + v)]));
          }
        }
      }
    }
  }
  // About 2^-15 of the values at most (the share of floats' width within 2^-40 of their edges).
  MESSAGE(uncertain << " of " << values << " values made again on the host");
  CHECK(uncertain < values / 4000);
}

TEST_CASE("latent draw: draws built next to a float rounding edge are caught wherever log and cos can move them") {
  // Each case: u1 from a random word, u2 solved so that z lands within a few doubles of the midpoint
  // between a random float and its neighbour (or of the edge below a power of two).
  std::mt19937_64 rng(20261128);
  int cases = 0, moved = 0;
  for (int attempt = 0; attempt < 4000; ++attempt) {
    const double u1 = 1.0 - unit_interval(rng());
    if (u1 == 1.0) continue;
    const double radius = std::sqrt(-2.0 * std::log(u1));
    std::uniform_real_distribution<double> share(-0.98, 0.98);
    float f = static_cast<float>(radius * share(rng));
    if (attempt % 5 == 0) f = std::ldexp(1.0f, std::ilogb(f));  // a power of two: its lower edge is closer
    if (f == 0) continue;
    const float toward = (attempt % 2) ? HUGE_VALF : -HUGE_VALF;
    const double edge = (static_cast<double>(f) + static_cast<double>(std::nextafter(f, toward))) * 0.5;
    if (std::fabs(edge) >= radius) continue;
    // cos(2 pi u2) = edge / radius: u2 on the grid of 2^-53, searched around the solution.
    const double j0 = std::acos(edge / radius) / kBoxMullerTurn * 0x1.0p53;
    double best_u2 = 0, best_gap = HUGE_VAL;
    for (int d = -64; d <= 64; ++d) {
      const double u2 = (std::floor(j0) + d) * 0x1.0p-53;
      ModelGpuBoxMuller host{0, 0, false};
      const double gap = std::fabs(host(u1, u2) - edge);
      if (gap < best_gap) best_gap = gap, best_u2 = u2;
    }
    ModelGpuBoxMuller exact{0, 0, false};
    const double z_host = exact(u1, best_u2);
    if (std::fabs(z_host - edge) > 8 * std::fabs(edge) * DBL_EPSILON) continue;  // the grid missed it
    ++cases;
    const float f_host = static_cast<float>(z_host);
    for (int ls = -1; ls <= 1; ++ls) {
      for (int cs = -2; cs <= 2; ++cs) {
        ModelGpuBoxMuller gpu{ls, cs, false};
        const double z_gpu = gpu(u1, best_u2);
        const bool differs = !same_bits(static_cast<float>(z_gpu), f_host);
        moved += differs;
        REQUIRE(gpu.uncertain);  // within a few doubles of an edge: always doubted
        if (differs) CHECK(draw_uncertain(u1, z_gpu));
      }
    }
  }
  MESSAGE(cases << " draws next to an edge; " << moved << " moved floats across it, every one caught");
  CHECK(cases > 500);
  CHECK(moved > 0);
}

TEST_CASE("latent draw: outside the detector's bound, no z within the documented error has another float") {
  // The class: any z, any z' with |z' - z| <= 12 * 2^-53 |z| (CUDA's and glibc's errors together);
  // near_float_rounding_edge(z') false must mean float(z') == float(z). Values from every binade of
  // the latents, at the edges and inside.
  std::mt19937_64 rng(7);
  const double budget = 12 * 0x1.0p-53;
  int64_t checked = 0, doubted = 0;
  for (int k = 0; k < 200000; ++k) {
    const float f = std::ldexp(static_cast<float>(rng() >> 41) * 0x1.0p-24f + 0.5f, static_cast<int>(rng() % 40) - 36) *
                    ((rng() & 1) ? 1.0f : -1.0f);
    const double edge = (static_cast<double>(f) + static_cast<double>(std::nextafter(f, HUGE_VALF))) * 0.5;
    const double z = (k % 3 == 0) ? static_cast<double>(f) : step_by(edge, static_cast<int>(rng() % 2001) - 1000);
    for (double e : {-1.0, -0.5, -1e-3, 0.0, 1e-3, 0.5, 1.0}) {
      const double z2 = z + e * budget * std::fabs(z);
      ++checked;
      if (near_float_rounding_edge(z2)) {
        ++doubted;
        continue;
      }
      REQUIRE(same_bits(static_cast<float>(z2), static_cast<float>(z)));
    }
  }
  CHECK(doubted > 0);
  CHECK(doubted < checked);
  // And the bound is not everything: random draws are almost never doubted.
  int64_t random_doubts = 0;
  for (int k = 0; k < 1000000; ++k) random_doubts += near_float_rounding_edge(random_latent_value(3, k / 100, k % 100));
  CHECK(random_doubts < 200);
}

TEST_CASE("truncation: every value within [-T, T], the same for any split, and T past every draw changes nothing") {
  const int nz = 100;
  for (double t : {1e-3, 0.05, 0.3, 1.0, 2.5, 8.0}) {
    CAPTURE(t);
    auto source = make_random_latents(300, 42, 0, nz, t);
    const std::vector<float> whole = read_all(*source, 0, 300, nz);
    for (float v : whole) REQUIRE(std::fabs(v) <= t);
    // Another split, and a source that starts further in: the same values.
    for (int64_t first : {0, 1, 37, 299}) {
      auto later = make_random_latents(300 - first, 42, first, nz, t);
      const std::vector<float> part = read_all(*later, 0, 300 - first, nz);
      REQUIRE(std::memcmp(part.data(), whole.data() + first * nz, part.size() * sizeof(float)) == 0);
    }
    // A value whose first draw is within [-T, T] keeps it.
    auto plain = make_random_latents(300, 42, 0, nz);
    const std::vector<float> untruncated = read_all(*plain, 0, 300, nz);
    for (size_t i = 0; i < whole.size(); ++i)
      if (std::fabs(untruncated[i]) <= t) REQUIRE(same_bits(whole[i], untruncated[i]));
    // A seed's latent is image 0 of its sequence, truncated the same way.
    std::vector<float> seed_values(nz);
    seed_latent(42, nz, seed_values.data(), t);
    REQUIRE(std::memcmp(seed_values.data(), whole.data(), nz * sizeof(float)) == 0);
  }
  for (double t : {kLargestDraw, 9.0, 1e6, 1e300, DBL_MAX}) {
    CAPTURE(t);
    for (uint64_t seed : {uint64_t{1}, uint64_t{99}}) {
      auto truncated = make_random_latents(200, seed, 5, nz, t);
      auto plain = make_random_latents(200, seed, 5, nz);
      REQUIRE(read_all(*truncated, 0, 200, nz) == read_all(*plain, 0, 200, nz));
      auto truncated_grid = make_interpolation_latents(6, seed, nz, t);
      auto plain_grid = make_interpolation_latents(6, seed, nz);
      REQUIRE(read_all(*truncated_grid, 0, 36, nz) == read_all(*plain_grid, 0, 36, nz));
    }
  }
  CHECK(std::sqrt(-2.0 * std::log(0x1.0p-53)) < kLargestDraw);  // the largest |z| any draw reaches
}

TEST_CASE("truncation: T = 1 looks like N(0, 1) truncated to [-1, 1]; a small T like the uniform it falls back to") {
  auto source = make_random_latents(2000, 5, 0, kLatentDim, 1.0);
  const std::vector<float> values = read_all(*source, 0, 2000, kLatentDim);
  double sum = 0, squares = 0;
  for (float v : values) sum += v, squares += double{v} * v;
  const double n = static_cast<double>(values.size());
  CHECK(std::fabs(sum / n) < 0.01);
  // Var = 1 - 2 phi(1) / (2 Phi(1) - 1) = 0.29113; 200,000 values: its sd is 0.0006.
  CHECK(std::fabs(squares / n - 0.29113) < 0.004);

  auto narrow = make_random_latents(2000, 5, 0, kLatentDim, 0.01);
  const std::vector<float> small = read_all(*narrow, 0, 2000, kLatentDim);
  squares = 0;
  for (float v : small) squares += double{v} * v;
  CHECK(std::fabs(squares / n - 0.01 * 0.01 / 3) < 0.01 * 0.01 / 30);  // uniform on [-T, T]: T^2 / 3
}

TEST_CASE("truncation: the largest float not above T; interpolation ends are truncated draws") {
  for (double t : {0.1, 0.5, 1.0 / 3, 8.5, 1e-30, 1e300}) {
    CAPTURE(t);
    const Truncation truncation = truncation_to(t);
    CHECK(truncation.active);
    CHECK(static_cast<double>(truncation.limit) <= t);
    if (truncation.limit < FLT_MAX) CHECK(static_cast<double>(std::nextafter(truncation.limit, HUGE_VALF)) > t);
  }
  CHECK(truncation_to(0.5).limit == 0.5f);
  auto grid = make_interpolation_latents(4, 9, kLatentDim, 0.7);
  const std::vector<float> values = read_all(*grid, 0, 16, kLatentDim);
  for (int64_t row = 0; row < 4; ++row) {
    for (int v = 0; v < kLatentDim; ++v) {
      const float start = static_cast<float>(drawn_latent_value(9, 2 * row, v, truncation_to(0.7)));
      const float end = static_cast<float>(drawn_latent_value(9, 2 * row + 1, v, truncation_to(0.7)));
      REQUIRE(std::fabs(start) <= 0.7f);
      REQUIRE(same_bits(values[static_cast<size_t>(row * 4 * kLatentDim + v)], start));
      REQUIRE(same_bits(values[static_cast<size_t>((row * 4 + 3) * kLatentDim + v)], end));
    }
  }
}

TEST_CASE("latent sources: drawn ones give recipes of any range; files and interpolations are read") {
  const int nz = 7;
  auto random = make_random_latents(50, 3, 10, nz, 0.5);
  auto listed = make_seed_latents(seeds_of("9,1-20,9"), nz);
  for (LatentSource* source : {random.get(), listed.get()}) {
    for (int64_t first : {0, 5, 21}) {
      const int64_t count = 1 + first % 7;
      std::vector<uint64_t> seeds(static_cast<size_t>(count), 0);
      const LatentRecipe recipe = source->recipe(first, count, seeds.data());
      const std::vector<float> host = read_all(*source, first, count, nz);
      for (int64_t i = 0; i < count; ++i)
        for (int v = 0; v < nz; ++v) REQUIRE(same_bits(recipe_value(recipe, i, v), host[static_cast<size_t>(i * nz + v)]));
    }
    std::vector<uint64_t> seeds(2);
    CHECK_THROWS_AS(source->recipe(source->count() - 1, 2, seeds.data()), std::invalid_argument);
  }
  auto grid = make_interpolation_latents(3, 1, nz);
  CHECK_FALSE(grid->drawn());
  std::vector<uint64_t> seeds(1);
  CHECK_THROWS_AS(grid->recipe(0, 1, seeds.data()), std::logic_error);
}
