// fma_peak.hpp: the multiply-add ceiling of one CPU core (bench/fma_peak.cpp).
#pragma once

#include <cstdint>

namespace facegen {

struct FmaRate {
  double per_second;      // FLOP per second of wall time
  double per_cpu_second;  // FLOP per second of the thread's CPU time
};

// One thread running fused multiply-adds on `lanes` = 16 (AVX-512) or 8 (AVX2) floats, `steps`
// rounds of 12 independent chains. The caller checks that the CPU has the instructions.
FmaRate fma_rate(int lanes, int64_t steps);

}  // namespace facegen
