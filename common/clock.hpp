// clock.hpp: the one clock every stage is timed with.
#pragma once

#include <chrono>

namespace facegen {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace facegen
