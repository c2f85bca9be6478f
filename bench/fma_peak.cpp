// fma_peak.cpp: the multiply-add ceiling of this CPU, for `make bench-cpu` to set its figures
// beside.
//
// Each thread runs chains of independent fused multiply-adds on registers (no memory), 12 chains
// so the FMA units' latency is covered; FLOP/s = 2 x lanes x FMAs / seconds, by the wall clock and
// by the thread's CPU time (the peak while it runs, on a machine shared with other work).
#include "bench/fma_peak.hpp"

#include <immintrin.h>
#include <time.h>

#include <chrono>

namespace facegen {

namespace {

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

template <class Reg, Reg (*Fma)(Reg, Reg, Reg), Reg (*Set1)(float), float (*First)(Reg)>
FmaRate fma_chains(int64_t steps) {
  Reg acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = Set1(float(i));
  const Reg a = Set1(0.999999f), b = Set1(1e-7f);
  const double cpu0 = thread_cpu_seconds();
  const auto start = std::chrono::steady_clock::now();
  for (int64_t s = 0; s < steps; ++s)
    for (int i = 0; i < 12; ++i) acc[i] = Fma(acc[i], a, b);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu = thread_cpu_seconds() - cpu0;
  float sink = 0;
  for (int i = 0; i < 12; ++i) sink += First(acc[i]);
  volatile float keep = sink;  // the chains' results are used, so they are computed
  (void)keep;
  const double flops = 2.0 * sizeof(Reg) / sizeof(float) * 12 * steps;
  return {flops / seconds, flops / cpu};
}

__m512 fma512(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
__m512 set512(float x) { return _mm512_set1_ps(x); }
float first512(__m512 v) { return _mm512_cvtss_f32(v); }
__m256 fma256(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
__m256 set256(float x) { return _mm256_set1_ps(x); }
float first256(__m256 v) { return _mm256_cvtss_f32(v); }

#pragma GCC pop_options

}  // namespace

FmaRate fma_rate(int lanes, int64_t steps) {
  if (lanes == 16) return fma_chains<__m512, fma512, set512, first512>(steps);
  return fma_chains<__m256, fma256, set256, first256>(steps);
}

}  // namespace facegen
