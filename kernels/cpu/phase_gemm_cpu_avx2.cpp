// phase_gemm_cpu_avx2.cpp: phase_gemm_cpu's micro-kernels for AVX2 with FMA (8 floats per vector).
//
// 6 rows x 2 vectors (16 output channels) of accumulators, 12 of the 16 ymm registers; a half panel
// is 6 rows x 1 vector. The last layer: 2 input rows x 3 channels x 2 vectors (12), or 4 rows x 1
// channel x 2 vectors for grey images.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/phase_gemm_cpu_isa.hpp"

namespace facegen {
namespace {

#pragma GCC push_options
#pragma GCC target("avx2,fma")

struct Avx2 {
  using Reg = __m256;
  static constexpr int kLanes = 8;
  static Reg zero() { return _mm256_setzero_ps(); }
  static Reg load(const float* p) { return _mm256_loadu_ps(p); }
  static Reg broadcast(const float* p) { return _mm256_set1_ps(*p); }
  static Reg fma(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  static Reg add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static Reg sub(Reg a, Reg b) { return _mm256_sub_ps(a, b); }
  static Reg mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  static Reg div(Reg a, Reg b) { return _mm256_div_ps(a, b); }
  static Reg min(Reg a, Reg b) { return _mm256_min_ps(a, b); }
  static Reg max(Reg a, Reg b) { return _mm256_max_ps(a, b); }
  static Reg set1(float x) { return _mm256_set1_ps(x); }
  static Reg round(Reg a) {
    return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static Reg times_pow2(Reg p, Reg k) {
    const __m256i bits = _mm256_slli_epi32(_mm256_cvtps_epi32(k), 23);
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), bits));
  }
  static Reg relu(Reg a) { return _mm256_max_ps(a, _mm256_setzero_ps()); }
  static void store(float* p, Reg v) { _mm256_storeu_ps(p, v); }
};

#include "kernels/cpu/phase_gemm_cpu_kernels.inl"

constexpr int kRows = 6, kVectors = 2;
constexpr int kRgbRows = 2, kGreyRows = 4;  // of the last layer

void relu_tile_avx2(const PhaseTile& t) { relu_tile<Avx2, kRows, kVectors>(t); }
void relu_tile_half_avx2(const PhaseTile& t) { relu_tile<Avx2, kRows, kVectors / 2>(t); }
void tanh_grey_avx2(const PlanarTile& t) { tanh_rows<Avx2, 1, kGreyRows>(t); }
void tanh_rgb_avx2(const PlanarTile& t) { tanh_rows<Avx2, 3, kRgbRows>(t); }

#pragma GCC pop_options

}  // namespace

const PhaseGemmKernels& avx2_phase_kernels() {
  static const PhaseGemmKernels kernels{
      kVectors * Avx2::kLanes, kRows,     relu_tile_avx2, relu_tile_half_avx2,
      2 * Avx2::kLanes,        kGreyRows, tanh_grey_avx2, kRgbRows,
      tanh_rgb_avx2};
  return kernels;
}

}  // namespace facegen
