// test_finite_check.cpp: a model whose weights are finite but overflow is caught and its layer named.
//
// Each block is set to +-3e38 (its signs kept) in a fresh random network; the layer trace must name
// exactly that block's layer for random latents, and name nothing for the unchanged network.
// require_finite_images() is fed poisoned images (a NaN, an Inf, all +-1) at odd positions, and latents
// with values no Gaussian latent has, which are named instead of the model when they are the cause.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "generator/finite_check.hpp"
#include "generator/network.hpp"

using namespace facegen;

namespace {

// Every value of [offset, offset + count) set to +-3e38 with its sign kept.
void overflow_block(Network& net, int64_t offset, int64_t count) {
  std::vector<float>& f = net.mutable_floats();
  for (int64_t i = offset; i < offset + count; ++i) f[i] = f[i] >= 0 ? 3e38f : -3e38f;
}

std::vector<float> random_latents(int64_t count, uint64_t seed) {  // (count, 100)
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> z(static_cast<size_t>(count) * kLatentDim);
  for (float& v : z) v = normal(rng);
  return z;
}

}  // namespace

TEST_CASE("finite check: the layer whose output overflows is named, and none for a sane model") {
  const Network sane = make_random_network(11);
  const std::vector<float> z = random_latents(3, 12);
  for (int i = 0; i < 3; ++i) CHECK(first_non_finite_layer(sane, z.data() + i * kLatentDim).empty());

  struct Case { const char* layer; int64_t offset; int64_t count; };
  const Case cases[] = {
      {"proj", sane.proj_weight_offset(), int64_t{kLatentDim} * kProjOutputs},
      {"bn1", sane.batchnorm_offset(1), 2 * kStageChannels[1]},  // beta and gamma
      {"tconv2", sane.tconv_weight_offset(1), int64_t{25} * kStageChannels[1] * kStageChannels[2]},
      {"tconv4", sane.tconv_weight_offset(3), int64_t{25} * kStageChannels[3] * kStageChannels[4]},
  };
  for (const Case& c : cases) {
    CAPTURE(c.layer);
    Network bad = sane;
    overflow_block(bad, c.offset, c.count);
    for (int i = 0; i < 3; ++i) CHECK(first_non_finite_layer(bad, z.data() + i * kLatentDim) == c.layer);
  }
}

TEST_CASE("finite check: a NaN, an Inf or a saturated image is traced; the message names layer and image") {
  const Network sane = make_random_network(21);
  Network bad = sane;
  overflow_block(bad, sane.tconv_weight_offset(2), int64_t{25} * kStageChannels[2] * kStageChannels[3]);
  const int64_t count = 5;
  const std::vector<float> z = random_latents(count, 22);
  std::vector<float> images(static_cast<size_t>(count) * kImageValues, 0.25f);  // (5, 64, 64, 3)

  // Ordinary images, not the first of the run: nothing is traced, even for a bad model.
  CHECK_NOTHROW(require_finite_images(bad, "m.bin", z.data(), images.data(), count, 7, 1));
  // The first image of the run is always traced.
  CHECK_THROWS_WITH_AS(require_finite_images(bad, "m.bin", z.data(), images.data(), count, 0, 1),
                       "m.bin is a bad model: its weights are finite but the output of layer tconv3 is NaN or "
                       "Inf for image 0",
                       UserError);
  CHECK_NOTHROW(require_finite_images(sane, "m.bin", z.data(), images.data(), count, 0, 1));

  images[3 * kImageValues + 4095] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH_AS(require_finite_images(bad, "m.bin", z.data(), images.data(), count, 7, 1),
                       "m.bin is a bad model: its weights are finite but the output of layer tconv3 is NaN or "
                       "Inf for image 10",
                       UserError);
  // The reference finds nothing: the backend's arithmetic overflowed.
  CHECK_THROWS_WITH_AS(require_finite_images(sane, "m.bin", z.data(), images.data(), count, 7, 1),
                       doctest::Contains("gives a NaN or Inf in image 10 although every float32 reference layer "
                                         "is finite"),
                       UserError);
  images[3 * kImageValues + 4095] = -std::numeric_limits<float>::infinity();
  CHECK_THROWS_AS(require_finite_images(sane, "m.bin", z.data(), images.data(), count, 7, 1), UserError);

  // An image of +-1 alone: traced; a sane model's saturation is not an error.
  images[3 * kImageValues + 4095] = 0.25f;
  for (int v = 0; v < kImageValues; ++v) images[1 * kImageValues + v] = v % 3 ? 1.0f : -1.0f;
  CHECK_THROWS_WITH_AS(require_finite_images(bad, "m.bin", z.data(), images.data(), count, 7, 1),
                       doctest::Contains("layer tconv3 is NaN or Inf for image 8"), UserError);
  CHECK_NOTHROW(require_finite_images(sane, "m.bin", z.data(), images.data(), count, 7, 1));
}

TEST_CASE("finite check: every kind of float is classed right, and the first bad image is named at any thread count") {
  const Network sane = make_random_network(31);
  Network bad = sane;
  overflow_block(bad, sane.tconv_weight_offset(2), int64_t{25} * kStageChannels[2] * kStageChannels[3]);
  const int64_t count = 257;  // odd, so that no split over threads is even
  const std::vector<float> z = random_latents(count, 32);
  std::vector<float> images(static_cast<size_t>(count) * kImageValues, -0.5f);  // (257, 64, 64, 3)
  const float inf = std::numeric_limits<float>::infinity();
  // Finite, so never traced past the first image, even by a bad model: zeros of both signs, the
  // smallest denormal, the largest float, and +-1 beside a value one ulp above 1 (not saturated).
  const float finite_values[] = {0.0f, -0.0f, std::numeric_limits<float>::denorm_min(),
                                 -std::numeric_limits<float>::max(), std::nextafter(1.0f, 2.0f)};
  for (float v : finite_values) {
    CAPTURE(v);
    std::vector<float> one = images;
    for (int k = 0; k < kImageValues; ++k) one[200 * kImageValues + k] = k % 2 ? 1.0f : -1.0f;
    one[200 * kImageValues + 4097] = v;
    for (int threads : {1, 2, 3, 8}) CHECK_NOTHROW(require_finite_images(bad, "m.bin", z.data(), one.data(), count, 7, threads));
  }
  // Not finite: a quiet NaN, a signalling NaN, a negative NaN and both infinities, in the last value of
  // image 250 and in the first of image 131; the message names image 131 (+7) at every thread count.
  const float non_finite[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::signaling_NaN(),
                              -std::numeric_limits<float>::quiet_NaN(), inf, -inf};
  for (float v : non_finite) {
    CAPTURE(v);
    std::vector<float> one = images;
    one[251 * kImageValues - 1] = v;
    one[131 * kImageValues] = v;
    for (int threads : {1, 2, 3, 8}) {
      CAPTURE(threads);
      CHECK_THROWS_WITH_AS(require_finite_images(bad, "m.bin", z.data(), one.data(), count, 7, threads),
                           "m.bin is a bad model: its weights are finite but the output of layer tconv3 is NaN or "
                           "Inf for image 138",
                           UserError);
    }
  }
  // Every value exactly +-1, signs mixed: traced, for image 256 alone (the last).
  std::vector<float> saturated = images;
  for (int k = 0; k < kImageValues; ++k) saturated[256 * kImageValues + k] = k % 5 ? -1.0f : 1.0f;
  for (int threads : {1, 2, 3, 8}) {
    CHECK_THROWS_WITH_AS(require_finite_images(bad, "m.bin", z.data(), saturated.data(), count, 7, threads),
                         doctest::Contains("layer tconv3 is NaN or Inf for image 263"), UserError);
    CHECK_NOTHROW(require_finite_images(sane, "m.bin", z.data(), saturated.data(), count, 7, threads));
  }
}

TEST_CASE("finite check: a latent far outside a Gaussian's range is named, not the model; ordinary ones blame the model") {
  const Network sane = make_random_network(41);
  Network bad = sane;
  overflow_block(bad, sane.tconv_weight_offset(2), int64_t{25} * kStageChannels[2] * kStageChannels[3]);
  const int64_t count = 6;
  std::vector<float> z = random_latents(count, 42);
  std::vector<float> images(static_cast<size_t>(count) * kImageValues, 0.25f);  // (6, 64, 64, 3)
  // Image 4 (13 in the run): every value +-3.4e38, the largest magnitude first at value 1. Its image
  // looks ordinary (a backend's tanh or ReLU may hide the overflow): it is traced all the same.
  for (int v = 0; v < kLatentDim; ++v) z[4 * kLatentDim + v] = v % 2 ? -3.4e38f : 3.4e38f;
  z[4 * kLatentDim + 3] = -3.40001e38f;  // the largest, value 4
  for (int threads : {1, 2, 5}) {
    CAPTURE(threads);
    CHECK_THROWS_WITH_AS(require_finite_images(sane, "m.bin", z.data(), images.data(), count, 9, threads),
                         "latent 14 of the input (image 13), value 4 of 100, is -3.40001e+38, far outside a Gaussian "
                         "latent's range: it makes layer proj's output NaN or Inf, which the model avoids with the "
                         "latent clamped to [-16, 16]",
                         UserError);
  }
  // A bad model overflows on the clamped latent too: the model is named.
  CHECK_THROWS_WITH_AS(require_finite_images(bad, "m.bin", z.data(), images.data(), count, 9, 1),
                       doctest::Contains("m.bin is a bad model: its weights are finite but the output of layer"),
                       UserError);
  // The backend gave a NaN where the float32 reference is finite: a latent beyond +-16 is named.
  std::vector<float> mild = random_latents(count, 43);
  mild[2 * kLatentDim + 50] = 1e30f;
  images[2 * kImageValues + 7] = std::numeric_limits<float>::quiet_NaN();
  REQUIRE(first_non_finite_layer(sane, mild.data() + 2 * kLatentDim).empty());
  CHECK_THROWS_WITH_AS(require_finite_images(sane, "m.bin", mild.data(), images.data(), count, 0, 1),
                       "latent 3 of the input (image 2), value 51 of 100, is 1e+30, far outside a Gaussian latent's "
                       "range: the backend's arithmetic overflows to NaN or Inf on it (try --precision fp32)",
                       UserError);
  // Within +-16 (a Gaussian scaled twice over), or beyond it but finite through every layer: no error.
  images[2 * kImageValues + 7] = 0.25f;
  std::vector<float> scaled = random_latents(count, 44);
  for (float& v : scaled) v *= 2.0f;
  scaled[kLatentDim + 5] = 15.9f;
  CHECK_NOTHROW(require_finite_images(sane, "m.bin", scaled.data(), images.data(), count, 3, 2));
  scaled[kLatentDim + 5] = 40.0f;
  REQUIRE(first_non_finite_layer(sane, scaled.data() + kLatentDim).empty());
  CHECK_NOTHROW(require_finite_images(sane, "m.bin", scaled.data(), images.data(), count, 3, 2));
}

TEST_CASE("finite check of drawn latents: require_flags' decisions, with only the traced images' latents made") {
  const Network sane = make_random_network(51);
  Network bad = sane;
  overflow_block(bad, sane.tconv_weight_offset(2), int64_t{25} * kStageChannels[2] * kStageChannels[3]);
  const int64_t count = 9;
  const std::vector<float> z = random_latents(count, 52);  // within +-16, as drawn latents always are
  std::mt19937_64 rng(53);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<uint8_t> flags(static_cast<size_t>(count), 0);  // (9): a random few bad or saturated
    for (int k = 0; k < trial % 4; ++k) flags[rng() % count] |= static_cast<uint8_t>(1 + rng() % 2);
    const int64_t first = (trial % 3 == 0) ? 0 : 17;
    for (const Network* net : {&sane, static_cast<const Network*>(&bad)}) {
      CAPTURE(trial);
      std::string with_pointer, drawn;
      try {
        require_finite_flags(*net, "m.bin", z.data(), flags.data(), count, first, 2);
      } catch (const UserError& e) {
        with_pointer = e.what();
      }
      std::vector<int64_t> made;  // the images whose latent the check asked for
      try {
        require_finite_drawn(*net, "m.bin", [&](int64_t i, float* out) {
          made.push_back(i);
          std::copy(z.begin() + i * kLatentDim, z.begin() + (i + 1) * kLatentDim, out);
        }, flags.data(), count, first);
      } catch (const UserError& e) {
        drawn = e.what();
      }
      CHECK(drawn == with_pointer);
      for (int64_t i : made) CHECK((flags[static_cast<size_t>(i)] != 0 || first + i == 0));
    }
  }
}
