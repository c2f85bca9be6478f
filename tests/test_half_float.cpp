// test_half_float.cpp: float16 on the host (common/half_float.hpp) against a decoder written from
// the format's definition: every one of the 65,536 halves widens exactly (by both routes of
// halves_to_floats where the CPU has F16C), every finite half
// survives the round trip, every tie between two neighbouring halves goes to the even one and its
// float neighbours to the nearer one, and random floats of every magnitude round to the nearest.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <ios>
#include <limits>
#include <random>
#include <vector>

#include "common/half_float.hpp"

namespace {

using facegen::float_to_half;
using facegen::half_to_float;

// The value of a finite half: sign, 5 exponent bits (bias 15), 10 mantissa bits; exponent 0 is
// subnormal (m * 2^-24).
double finite_half_value(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}
bool half_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
bool half_is_inf(uint16_t h) { return (h & 0x7fff) == 0x7c00; }
uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}
float float_of(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// x rounds to h: h has x's sign, and no neighbouring half (one step up or down in magnitude) is
// nearer to x; at equal distance h is the even one.
void check_nearest(float x, uint16_t h) {
  INFO("x = " << x << " (bits 0x" << std::hex << bits_of(x) << "), half 0x" << h);
  REQUIRE(!half_is_nan(h));
  REQUIRE(!half_is_inf(h));
  CHECK(bool(h & 0x8000) == std::signbit(x));
  const uint16_t m = h & 0x7fff;
  const double ax = std::fabs(double(x)), here = std::fabs(finite_half_value(m));
  for (int step : {-1, 1}) {
    if ((step < 0 && m == 0) || (step > 0 && m == 0x7bff)) continue;
    const double there = finite_half_value(static_cast<uint16_t>(m + step));
    const double d_here = std::fabs(ax - here), d_there = std::fabs(ax - there);
    CHECK(d_here <= d_there);
    if (d_here == d_there) CHECK((m & 1) == 0);
  }
}

}  // namespace

TEST_CASE("half_to_float widens every half exactly, and halves_to_floats does the same by either route") {
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  std::vector<facegen::HalfWidening> routes = {facegen::HalfWidening::Portable};
  if (facegen::best_half_widening() == facegen::HalfWidening::F16c) routes.push_back(facegen::HalfWidening::F16c);
  MESSAGE("halves_to_floats routes tested: " << routes.size() << " (2 where the CPU has F16C)");
  for (auto route : routes) {
    // Every length from 0 to 17 at every start from 0 to 7 (the F16C route's 8-value steps and
    // its tail), then everything at once; poison after the end.
    for (size_t start = 0; start < 8; ++start)
      for (size_t count = 0; count <= 17; ++count) {
        std::vector<float> part(count + 2, 12345.f);
        facegen::halves_to_floats(all.data() + 0x3bf0 + start, count, part.data(), route);
        for (size_t i = 0; i < count; ++i) CHECK(bits_of(part[i]) == bits_of(half_to_float(all[0x3bf0 + start + i])));
        CHECK(part[count] == 12345.f);
      }
    std::vector<float> wide(all.size() + 3, 12345.f);
    facegen::halves_to_floats(all.data(), all.size(), wide.data(), route);
    for (int k = 0; k < 3; ++k) CHECK(wide[all.size() + k] == 12345.f);
    int differ = 0;
    for (uint32_t i = 0; i < 65536; ++i) differ += bits_of(half_to_float(all[i])) != bits_of(wide[i]);
    CHECK_MESSAGE(differ == 0, "route " << int(route));
  }
  int wrong = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = all[i];
    const float f = half_to_float(h);
    if (half_is_nan(h)) {  // payload kept, made quiet
      if (!std::isnan(f) || ((bits_of(f) >> 13) & 0x3ff) != ((h & 0x3ffu) | 0x200u) || std::signbit(f) != bool(h & 0x8000)) ++wrong;
    } else if (half_is_inf(h)) {
      if (f != ((h & 0x8000) ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity())) ++wrong;
    } else if (double(f) != finite_half_value(h) || std::signbit(f) != bool(h & 0x8000)) {
      ++wrong;
    }
  }
  CHECK(wrong == 0);
  CHECK(half_to_float(0x3c00) == 1.0f);
  CHECK(half_to_float(0xbc00) == -1.0f);
  CHECK(half_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(half_to_float(0x7bff) == 65504.0f);
}

TEST_CASE("float_to_half: round trips, ties to even, and the edges of the range") {
  int wrong = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t half = static_cast<uint16_t>(h);
    if (half_is_nan(half)) {
      if (!half_is_nan(float_to_half(half_to_float(half)))) ++wrong;
      continue;
    }
    if (float_to_half(half_to_float(half)) != half) ++wrong;
  }
  CHECK(wrong == 0);
  // Between every two neighbouring finite halves of one sign: the midpoint (exact in float32) goes
  // to the even one, the floats just below and above it to the nearer one.
  for (uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
    for (uint16_t m = 0; m < 0x7bff; ++m) {
      const uint16_t lo = sign | m, hi = sign | static_cast<uint16_t>(m + 1);
      const float mid = static_cast<float>((finite_half_value(lo) + finite_half_value(hi)) / 2);
      REQUIRE(double(mid) * 2 == finite_half_value(lo) + finite_half_value(hi));
      const float toward_zero = std::nextafter(mid, 0.f), away = std::nextafter(mid, sign ? -1e9f : 1e9f);
      if (float_to_half(mid) != ((m & 1) ? hi : lo)) ++wrong;
      if (float_to_half(toward_zero) != lo) ++wrong;
      if (float_to_half(away) != hi) ++wrong;
    }
  }
  CHECK(wrong == 0);
  CHECK(float_to_half(65504.f) == 0x7bff);
  CHECK(float_to_half(std::nextafter(65520.f, 0.f)) == 0x7bff);
  CHECK(float_to_half(65520.f) == 0x7c00);  // the tie above the largest half goes to the even one: Inf
  CHECK(float_to_half(-1e30f) == 0xfc00);
  CHECK(float_to_half(std::numeric_limits<float>::infinity()) == 0x7c00);
  CHECK(float_to_half(-0.f) == 0x8000);
  CHECK(float_to_half(std::ldexp(1.f, -25)) == 0x0000);      // halfway to the smallest subnormal: even is zero
  CHECK(float_to_half(std::ldexp(3.f, -25)) == 0x0002);      // halfway between subnormals 1 and 2
  CHECK(float_to_half(std::ldexp(1.f, -140)) == 0x0000);     // a float32 subnormal
  CHECK(half_is_nan(float_to_half(std::numeric_limits<float>::quiet_NaN())));
  CHECK(half_is_nan(float_to_half(-std::numeric_limits<float>::quiet_NaN())));
}

TEST_CASE("float_to_half rounds random floats of every magnitude to the nearest half") {
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<uint32_t> any_bits;
  std::uniform_real_distribution<float> unit(-1.f, 1.f);
  for (int i = 0; i < 400000; ++i) {
    const float x = float_of(any_bits(rng));  // every exponent, NaN and Inf included
    const uint16_t h = float_to_half(x);
    if (std::isnan(x)) {
      CHECK(half_is_nan(h));
    } else if (std::fabs(x) >= 65520.f) {
      CHECK(h == (std::signbit(x) ? 0xfc00 : 0x7c00));
    } else {
      check_nearest(x, h);
    }
    const float y = unit(rng);  // tanh's range, where the images live
    check_nearest(y, float_to_half(y));
    CHECK(std::fabs(half_to_float(float_to_half(y)) - y) <= 0x1p-12f);
  }
}
