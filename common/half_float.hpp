// half_float.hpp: IEEE 754 binary16 ("half", float16) values on the host.
//
// bf16 runs bring their images from the GPU as float16 (generator/gpu_pipeline.hpp says why):
// tanh's outputs lie in [-1, 1], where float16 keeps 11 significant bits, so a value moves by at
// most 2^-12 (2.4e-4), far inside bf16 arithmetic's own error. The host widens them back to float32
// with halves_to_floats(), which is exact. float_to_half() is the CPU reference of the GPU's
// rounding (kernels/image_output.cu): to nearest, ties to even, as __float2half_rn.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace facegen {

// Exact; +-Inf stays +-Inf, subnormals and -0 are kept; a NaN stays NaN with its payload and comes
// out quiet (as x86's F16C conversion makes it).
inline float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t magnitude = h & 0x7fffu;
  uint32_t bits = (magnitude << 13) + (112u << 23);  // exponent bias 15 -> 127, mantissa 10 -> 23 bits
  if (magnitude >= 0x7c00u) bits += 112u << 23;      // Inf and NaN: exponent 31 -> 255
  if (magnitude > 0x7c00u) bits |= 0x00400000u;      // NaN: quiet
  float value;
  std::memcpy(&value, &bits, sizeof value);
  if (magnitude < 0x0400u) value = static_cast<float>(magnitude) * 0x1p-24f;  // zero and subnormals: m * 2^-24
  uint32_t out;
  std::memcpy(&out, &value, sizeof out);
  out |= sign;
  std::memcpy(&value, &out, sizeof value);
  return value;
}

// Round to the nearest float16, ties to even; beyond 65520 in magnitude +-Inf; NaN -> a quiet NaN.
uint16_t float_to_half(float x);

// out[i] = half_to_float(in[i]) for i < count, bit for bit, by either of two routes: x86's F16C
// instructions where the CPU has them (with AVX2), else a loop the compiler vectorises with SSE2.
enum class HalfWidening { Portable, F16c };
HalfWidening best_half_widening();  // F16c where this CPU and OS support it
void halves_to_floats(const uint16_t* in, size_t count, float* out, HalfWidening how);
inline void halves_to_floats(const uint16_t* in, size_t count, float* out) {
  static const HalfWidening best = best_half_widening();
  halves_to_floats(in, count, out, best);
}

}  // namespace facegen
