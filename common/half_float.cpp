// half_float.cpp: see half_float.hpp.
#include "common/half_float.hpp"

#include <cmath>

#include "common/cpu_isa.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace facegen {

uint16_t float_to_half(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | 0x7e00u;     // NaN
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u;    // >= 65520, halfway to 2^16 (rounds to even: up), and Inf
  if (magnitude < 0x38800000u) {                          // below 2^-14: a subnormal half, or zero
    float scaled;                                         // |x| * 2^24, exact: a power of two, below 2^10
    std::memcpy(&scaled, &magnitude, sizeof scaled);
    scaled *= 0x1p24f;
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));  // the default rounding: to nearest, ties to even
  }
  uint32_t h = magnitude - (112u << 23);  // exponent bias 127 -> 15; mantissa still 23 bits
  const uint32_t dropped = h & 0x1fffu;   // the 13 bits float16 has no room for
  h >>= 13;
  if (dropped > 0x1000u || (dropped == 0x1000u && (h & 1u))) ++h;  // a carry moves into the exponent, as it should
  return sign | static_cast<uint16_t>(h);
}

namespace {

// half_to_float's steps with masks in place of branches, so that the loop vectorises.
void halves_to_floats_portable(const uint16_t* in, size_t count, float* out) {
  for (size_t i = 0; i < count; ++i) {
    const uint32_t h = in[i], magnitude = h & 0x7fffu;
    const uint32_t inf_or_nan = 0u - static_cast<uint32_t>(magnitude >= 0x7c00u);  // all ones or zero
    const uint32_t nan = 0u - static_cast<uint32_t>(magnitude > 0x7c00u);
    const uint32_t small = 0u - static_cast<uint32_t>(magnitude < 0x0400u);  // zero or subnormal
    const uint32_t normal = ((magnitude << 13) + (112u << 23) + (inf_or_nan & (112u << 23))) | (nan & 0x00400000u);
    const float subnormal_value = static_cast<float>(static_cast<int32_t>(magnitude)) * 0x1p-24f;
    uint32_t subnormal;
    std::memcpy(&subnormal, &subnormal_value, sizeof subnormal);
    const uint32_t bits = (subnormal & small) | (normal & ~small) | ((h & 0x8000u) << 16);
    std::memcpy(out + i, &bits, sizeof bits);
  }
}

#if defined(__x86_64__)
// Eight values per instruction (VCVTPH2PS), about the speed of a memcpy of the floats.
__attribute__((target("avx2,f16c"))) void halves_to_floats_f16c(const uint16_t* in, size_t count, float* out) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  halves_to_floats_portable(in + i, count - i, out + i);
}
#endif

}  // namespace

HalfWidening best_half_widening() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  // cpu_supports(Avx2) includes the OS's support for the 256-bit registers; F16C is cpuid leaf 1.
  if (cpu_supports(CpuIsa::Avx2) && __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C)) return HalfWidening::F16c;
#endif
  return HalfWidening::Portable;
}

void halves_to_floats(const uint16_t* in, size_t count, float* out, HalfWidening how) {
#if defined(__x86_64__)
  if (how == HalfWidening::F16c) {
    halves_to_floats_f16c(in, count, out);
    return;
  }
#endif
  halves_to_floats_portable(in, count, out);
}

}  // namespace facegen
