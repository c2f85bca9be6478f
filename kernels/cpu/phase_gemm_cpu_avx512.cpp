// phase_gemm_cpu_avx512.cpp: phase_gemm_cpu's micro-kernels for AVX-512 (16 floats per vector).
//
// 12 rows x 2 vectors (32 output channels) of accumulators, 24 of the 32 zmm registers; a half panel
// is 12 rows x 1 vector. The last layer: 4 input rows x 3 channels x 2 vectors (24), or 8 rows x 1
// channel x 2 vectors for grey images.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/phase_gemm_cpu_isa.hpp"

namespace facegen {
namespace {

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
// GCC 12's _mm512_max_ps starts from _mm512_undefined_ps, which -Wuninitialized reports.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

struct Avx512 {
  using Reg = __m512;
  static constexpr int kLanes = 16;
  static Reg zero() { return _mm512_setzero_ps(); }
  static Reg load(const float* p) { return _mm512_loadu_ps(p); }
  static Reg broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static Reg fma(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static Reg add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static Reg sub(Reg a, Reg b) { return _mm512_sub_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  static Reg div(Reg a, Reg b) { return _mm512_div_ps(a, b); }
  static Reg min(Reg a, Reg b) { return _mm512_min_ps(a, b); }
  static Reg max(Reg a, Reg b) { return _mm512_max_ps(a, b); }
  static Reg set1(float x) { return _mm512_set1_ps(x); }
  static Reg round(Reg a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT); }
  static Reg times_pow2(Reg p, Reg k) {
    const __m512i bits = _mm512_slli_epi32(_mm512_cvtps_epi32(k), 23);
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), bits));
  }
  static Reg relu(Reg a) { return _mm512_max_ps(a, _mm512_setzero_ps()); }
  static void store(float* p, Reg v) { _mm512_storeu_ps(p, v); }
};

#include "kernels/cpu/phase_gemm_cpu_kernels.inl"

constexpr int kRows = 12, kVectors = 2;
constexpr int kRgbRows = 4, kGreyRows = 8;  // of the last layer

void relu_tile_avx512(const PhaseTile& t) { relu_tile<Avx512, kRows, kVectors>(t); }
void relu_tile_half_avx512(const PhaseTile& t) { relu_tile<Avx512, kRows, kVectors / 2>(t); }
void tanh_grey_avx512(const PlanarTile& t) { tanh_rows<Avx512, 1, kGreyRows>(t); }
void tanh_rgb_avx512(const PlanarTile& t) { tanh_rows<Avx512, 3, kRgbRows>(t); }

#pragma GCC pop_options

}  // namespace

const PhaseGemmKernels& avx512_phase_kernels() {
  static const PhaseGemmKernels kernels{
      kVectors * Avx512::kLanes, kRows,     relu_tile_avx512, relu_tile_half_avx512,
      2 * Avx512::kLanes,        kGreyRows, tanh_grey_avx512, kRgbRows,
      tanh_rgb_avx512};
  return kernels;
}

}  // namespace facegen
