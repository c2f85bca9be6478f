// phase_gemm_cpu_sse2.cpp: phase_gemm_cpu's micro-kernels for SSE2 (4 floats per vector), which
// every x86-64 CPU has: the fallback when neither AVX2 with FMA nor AVX-512 is there. Without FMA
// a multiply-add rounds twice.
//
// 6 rows x 2 vectors (8 output channels) of accumulators, 12 of the 16 xmm registers; a half panel
// is 6 rows x 1 vector. The last layer: 2 input rows x 3 channels x 2 vectors (12), or 4 rows x 1
// channel x 2 vectors for grey images.
#include <emmintrin.h>

#include <cstdint>

#include "kernels/cpu/phase_gemm_cpu_isa.hpp"

namespace facegen {
namespace {

struct Sse2 {
  using Reg = __m128;
  static constexpr int kLanes = 4;
  static Reg zero() { return _mm_setzero_ps(); }
  static Reg load(const float* p) { return _mm_loadu_ps(p); }
  static Reg broadcast(const float* p) { return _mm_set1_ps(*p); }
  static Reg fma(Reg a, Reg b, Reg c) { return _mm_add_ps(_mm_mul_ps(a, b), c); }
  static Reg add(Reg a, Reg b) { return _mm_add_ps(a, b); }
  static Reg sub(Reg a, Reg b) { return _mm_sub_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm_mul_ps(a, b); }
  static Reg div(Reg a, Reg b) { return _mm_div_ps(a, b); }
  static Reg min(Reg a, Reg b) { return _mm_min_ps(a, b); }
  static Reg max(Reg a, Reg b) { return _mm_max_ps(a, b); }
  static Reg set1(float x) { return _mm_set1_ps(x); }
  static Reg round(Reg a) { return _mm_cvtepi32_ps(_mm_cvtps_epi32(a)); }  // to nearest, |a| < 2^31
  static Reg times_pow2(Reg p, Reg k) {
    const __m128i bits = _mm_slli_epi32(_mm_cvtps_epi32(k), 23);
    return _mm_castsi128_ps(_mm_add_epi32(_mm_castps_si128(p), bits));
  }
  static Reg relu(Reg a) { return _mm_max_ps(a, _mm_setzero_ps()); }
  static void store(float* p, Reg v) { _mm_storeu_ps(p, v); }
};

#include "kernels/cpu/phase_gemm_cpu_kernels.inl"

constexpr int kRows = 6, kVectors = 2;
constexpr int kRgbRows = 2, kGreyRows = 4;  // of the last layer

void relu_tile_sse2(const PhaseTile& t) { relu_tile<Sse2, kRows, kVectors>(t); }
void relu_tile_half_sse2(const PhaseTile& t) { relu_tile<Sse2, kRows, kVectors / 2>(t); }
void tanh_grey_sse2(const PlanarTile& t) { tanh_rows<Sse2, 1, kGreyRows>(t); }
void tanh_rgb_sse2(const PlanarTile& t) { tanh_rows<Sse2, 3, kRgbRows>(t); }

}  // namespace

const PhaseGemmKernels& sse2_phase_kernels() {
  static const PhaseGemmKernels kernels{
      kVectors * Sse2::kLanes, kRows,     relu_tile_sse2, relu_tile_half_sse2,
      2 * Sse2::kLanes,        kGreyRows, tanh_grey_sse2, kRgbRows,
      tanh_rgb_sse2};
  return kernels;
}

}  // namespace facegen
