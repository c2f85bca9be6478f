// text_lines.cpp: the txt output's lines: "N\n" then one line per image: its S * S * nc values
// (S, S, nc), C fastest, each as printf("%.4f ") writes it, then "\n".
//
// printf is exact: it rounds the float's exact binary value to 4 decimals, ties to even, and keeps
// the sign of negative values that round to zero ("-0.0000"). A float is m * 2^e with m < 2^24, so for
// |v| < 2^40 the value times 10^4 is m * 10^4 * 2^e, which 64-bit integers hold exactly; rounding it
// is a shift and a comparison of the bits shifted out. Larger values, Inf and NaN go to snprintf.
//
// Formatting is the cost (about 20x cheaper than fprintf per value, see docs/benchmarks/history.md); a
// run's lines are made and placed in parallel as variable-length records (record_run.cpp).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "formats/output_format.hpp"
#include "common/threads.hpp"

namespace facegen {
namespace {

// Biased exponent fields up to this one mean |v| < 2^40, the range of the integer path.
constexpr uint32_t kFastMaxExponentField = 127 + 39;

}  // namespace

size_t format_value_text(float v, char* out) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  const uint32_t exponent_field = (bits >> 23) & 0xff;
  if (exponent_field > kFastMaxExponentField) {
    char text[64];
    const int n = std::snprintf(text, sizeof text, "%.4f ", static_cast<double>(v));
    std::memcpy(out, text, static_cast<size_t>(n));
    return static_cast<size_t>(n);
  }

  // v = (-1)^sign * mantissa * 2^exponent, exactly.
  uint64_t mantissa = bits & 0x7fffff;
  int exponent = -149;
  if (exponent_field != 0) {
    mantissa |= 0x800000;
    exponent = static_cast<int>(exponent_field) - 150;
  }
  const uint64_t scaled = mantissa * 10000;  // < 2^38
  uint64_t units;                            // round(|v| * 10^4), ties to even
  if (exponent >= 0) {
    units = scaled << exponent;  // exponent <= 16: < 2^54
  } else if (exponent > -64) {
    const int shift = -exponent;
    const uint64_t rest = scaled & ((uint64_t{1} << shift) - 1);
    const uint64_t half = uint64_t{1} << (shift - 1);
    units = scaled >> shift;
    if (rest > half || (rest == half && (units & 1))) ++units;
  } else {
    units = 0;  // |v| * 10^4 < 2^38 * 2^-64
  }

  char* p = out;
  if (bits >> 31) *p++ = '-';
  uint64_t whole = units / 10000;
  uint32_t fraction = static_cast<uint32_t>(units % 10000);
  if (whole < 10) {
    *p++ = static_cast<char>('0' + whole);
  } else {
    char digits[20];
    int n = 0;
    while (whole > 0) {
      digits[n++] = static_cast<char>('0' + whole % 10);
      whole /= 10;
    }
    while (n > 0) *p++ = digits[--n];
  }
  p[0] = '.';
  p[4] = static_cast<char>('0' + fraction % 10);
  fraction /= 10;
  p[3] = static_cast<char>('0' + fraction % 10);
  fraction /= 10;
  p[2] = static_cast<char>('0' + fraction % 10);
  p[1] = static_cast<char>('0' + fraction / 10);
  p[5] = ' ';
  return static_cast<size_t>(p + 6 - out);
}

size_t format_image_text(const float* image, char* out, int64_t values) {
  if (values < 0) throw std::invalid_argument("format_image_text: a negative count of values");
  char* p = out;
  for (int64_t i = 0; i < values; ++i) p += format_value_text(image[i], p);
  *p++ = '\n';
  return static_cast<size_t>(p - out);
}

}  // namespace facegen
