// text_format.hpp: how numbers appear in messages and summaries.
#pragma once

#include <cstdint>
#include <string>

namespace facegen {

// 20549132 -> "20,549,132": byte and image counts in error messages.
std::string with_commas(int64_t value);

// 20549132 -> "20.5 MB" (powers of 1000): sizes in summaries.
std::string human_bytes(double bytes);

// 0.7 -> "0.7": the fewest significant digits ("%.Ng", N <= 17) that read back as the same double,
// for a value a user gave (--truncation) where a record must name it exactly.
std::string shortest_decimal(double value);

}  // namespace facegen
