// test_synthetic_backend.cpp: --device synthetic (generator/synthetic_backend.cpp), which computes each
// image's first period of 1,600 values and repeats it, against the formula written out for every value
// of every image: the float32 images, the scan flags and the 8-bit pixels, for latents of every kind
// (ordinary, huge, infinite, NaN), odd counts, several thread counts, into poisoned outputs.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "formats/image_run.hpp"
#include "generator/backend.hpp"
#include "generator/finite_check.hpp"

using namespace facegen;

namespace {

// Latents (n, 100): seeded values of ordinary size, with some of every odd kind.
std::vector<float> odd_latents(int64_t n, uint64_t seed) {
  std::vector<float> z(static_cast<size_t>(n * 100));
  const float odd[] = {1e30f, -1e30f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), 0.0f, -0.0f};
  for (size_t i = 0; i < z.size(); ++i) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    z[i] = static_cast<float>(static_cast<int64_t>(seed >> 40) - (int64_t{1} << 23)) / (1 << 21);  // within +-4
    if ((seed >> 32) % 97 == 0) z[i] = odd[(seed >> 20) % 6];
  }
  return z;
}

// The formula for every value (synthetic_backend.cpp's file comment), with no period.
std::vector<float> formula_images(const std::vector<float>& z, int64_t n) {
  std::vector<float> images(static_cast<size_t>(n * kImageValues));
  for (int64_t k = 0; k < n; ++k) {
    for (int i = 0; i < kImageValues; ++i) {
      const float x = z[static_cast<size_t>(k * 100 + i % 100)] + static_cast<float>(i % 64) / 32.0f - 1.0f;
      images[static_cast<size_t>(k * kImageValues + i)] = x / (1.0f + std::fabs(x));
    }
  }
  return images;
}

bool same_bits(const float* a, const float* b, size_t count) { return std::memcmp(a, b, count * sizeof(float)) == 0; }

}  // namespace

TEST_CASE("synthetic backend: the period's images, flags and pixels are the formula's, value for value") {
  for (const int threads : {1, 3}) {
    for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{64}}) {
      CAPTURE(threads);
      CAPTURE(n);
      BackendOptions options;
      options.device = DeviceKind::Synthetic;
      options.threads = threads;
      const auto backend = make_synthetic_backend(options);
      const std::vector<float> z = odd_latents(n, 11 + static_cast<uint64_t>(n) * 31 + static_cast<uint64_t>(threads));
      const std::vector<float> want = formula_images(z, n);
      std::vector<uint8_t> want_flags(static_cast<size_t>(n));
      std::vector<unsigned char> want_rgb(static_cast<size_t>(n * rgb8_image_bytes(kImageSize)));
      for (int64_t k = 0; k < n; ++k) {
        want_flags[static_cast<size_t>(k)] = scan_image(want.data() + k * kImageValues, kImageValues);
        image_to_rgb8(want.data() + k * kImageValues, 3, kImageSize, want_rgb.data() + k * rgb8_image_bytes(kImageSize));
      }

      std::vector<float> floats(want.size(), -7.5f);  // poisoned
      backend->generate(z.data(), n, floats.data());
      CHECK(same_bits(floats.data(), want.data(), want.size()));

      std::vector<float> checked(want.size(), 3.25f);
      std::vector<uint8_t> flags(static_cast<size_t>(n), 0xEE);
      backend->generate_checked(z.data(), n, {ImageEncoding::Float32, checked.data(), flags.data(), 100, 3, kImageSize}, threads);
      CHECK(same_bits(checked.data(), want.data(), want.size()));
      CHECK(flags == want_flags);

      std::vector<unsigned char> rgb(want_rgb.size(), 0xA5);
      std::vector<uint8_t> rgb_flags(static_cast<size_t>(n), 0xEE);
      backend->generate_checked(z.data(), n, {ImageEncoding::Rgb8, rgb.data(), rgb_flags.data(), 100, 3, kImageSize}, threads);
      CHECK(rgb == want_rgb);
      CHECK(rgb_flags == want_flags);
    }
  }
}

TEST_CASE("synthetic backend: the flags can say non-finite and saturated") {
  BackendOptions options;
  options.threads = 1;
  const auto backend = make_synthetic_backend(options);
  std::vector<float> z(200, 0.25f);
  z[17] = std::numeric_limits<float>::quiet_NaN();  // image 0: non-finite
  for (int i = 100; i < 200; ++i) z[static_cast<size_t>(i)] = 1e30f;  // image 1: every value exactly 1
  std::vector<unsigned char> rgb(2 * rgb8_image_bytes(kImageSize));
  std::vector<uint8_t> flags(2, 0);
  backend->generate_checked(z.data(), 2, {ImageEncoding::Rgb8, rgb.data(), flags.data(), 100, 3, kImageSize}, 1);
  CHECK(flags[0] == kImageNonFinite);
  CHECK(flags[1] == kImageSaturated);
}
