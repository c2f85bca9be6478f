// text_format.hpp: how numbers appear in messages and summaries.
#pragma once

#include <cstdint>
#include <string>

namespace facegen {

// 20549132 -> "20,549,132": byte and image counts in error messages.
std::string with_commas(int64_t value);

// 20549132 -> "20.5 MB" (powers of 1000): sizes in summaries.
std::string human_bytes(double bytes);

}  // namespace facegen
