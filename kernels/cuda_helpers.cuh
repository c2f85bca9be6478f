// cuda_helpers.cuh: the CUDA building blocks the GPU layers share: the arithmetic flavour a precision
// runs in (Math) and the one dispatch from --precision to it, the types stored in each flavour, the
// cp.async tile loads, ldmatrix, tf32 rounding, the epilogue stores, one mma.sync step, and one K
// tile of the two inner loops every GEMM-shaped layer runs: a warp's mma.sync fragments, or a
// thread's float32 FFMA block.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include "common/precision.hpp"

namespace facegen {
namespace gpu {

enum class Math { Fp32, Tf32, Bf16 };

// with_math(precision, f): calls f(MathConstant<M>{}) with the Math M of `precision`; f reads M as
// decltype(m)::value. The one place where --precision becomes a kernel's template argument.
template <Math M> using MathConstant = std::integral_constant<Math, M>;
template <class F>
void with_math(Precision precision, F&& f) {
  switch (precision) {
    case Precision::Fp32: f(MathConstant<Math::Fp32>{}); return;
    case Precision::Tf32: f(MathConstant<Math::Tf32>{}); return;
    case Precision::Bf16: f(MathConstant<Math::Bf16>{}); return;
  }
  throw std::logic_error("with_math: not a precision");
}
inline Math math_of(Precision precision) {
  Math math = Math::Fp32;
  with_math(precision, [&](auto m) { math = decltype(m)::value; });
  return math;
}

template <Math M> struct MathTypes { using Act = float; };
template <> struct MathTypes<Math::Bf16> { using Act = __nv_bfloat16; };

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  int bytes = valid ? 16 : 0;  // 0: fill the 16 bytes with zeros, read nothing
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Four 8x8 matrices of 16-bit elements (or 8x4 of 32-bit ones): lane l gives the address of row l % 8 of
// matrix l / 8 and receives, from matrix i, register i: row lane / 4, 32-bit column lane % 4.
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void* smem) {
  unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

__device__ __forceinline__ float round_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return __uint_as_float(r);
}

template <Math M> struct Store;
template <> struct Store<Math::Fp32> {
  static __device__ __forceinline__ void two(float* p, float a, float b) { *reinterpret_cast<float2*>(p) = make_float2(a, b); }
  static __device__ __forceinline__ void four(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
};
template <> struct Store<Math::Tf32> {
  static __device__ __forceinline__ void two(float* p, float a, float b) {
    *reinterpret_cast<float2*>(p) = make_float2(round_tf32(a), round_tf32(b));
  }
};
template <> struct Store<Math::Bf16> {
  static __device__ __forceinline__ void two(__nv_bfloat16* p, float a, float b) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
  }
};

// c (16 x 8, float32) += a (16 x K) * b (K x 8): bf16 m16n8k16, tf32 m16n8k8, fragments in mma.sync's
// register layout (row-major A, column-major B).
template <Math M>
__device__ __forceinline__ void mma_sync_step(float (&c)[4], const uint32_t (&a)[4], uint2 b) {
  if constexpr (M == Math::Bf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y));
  }
}

// One K tile (BK elements) of a warp's MI x NI mma.sync fragments of 16 x 8 outputs: A (rows, BK) and
// B (columns, BK) in shared memory, k fastest, rows kApitch and kBpitch elements apart; a_ld and b_ld
// are the lane's ldmatrix row offsets (A x4: rows 0-7 | 8-15 of a 16-row block x k half 0 | 1; B x4:
// n block ni at k half 0 | 1, then n block ni + 1). acc (MI * NI * 4) holds the fragments in
// mma.sync's register layout. An mma k step is 8 tf32 or 16 bf16: two 16-byte halves of each row.
template <Math M, int MI, int NI, int BK, int kApitch, int kBpitch, class Act>
__device__ __forceinline__ void mma_k_tile(const Act* As, const Act* Bs, int a_ld, int b_ld, float* acc) {
  constexpr int kHalfK = 16 / static_cast<int>(sizeof(Act));
  constexpr int KS = 2 * kHalfK;
#pragma unroll
  for (int k = 0; k < BK; k += KS) {
    uint32_t a[MI][4], b[NI][2];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) ldmatrix_x4(a[mi], As + a_ld + mi * 16 * kApitch + k);
#pragma unroll
    for (int nj = 0; nj < NI / 2; ++nj) {
      uint32_t r[4];
      ldmatrix_x4(r, Bs + b_ld + nj * 16 * kBpitch + k);
      b[2 * nj][0] = r[0];
      b[2 * nj][1] = r[1];
      b[2 * nj + 1][0] = r[2];
      b[2 * nj + 1][1] = r[3];
    }
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        float(&c)[4] = *reinterpret_cast<float(*)[4]>(acc + (mi * NI + ni) * 4);
        mma_sync_step<M>(c, a[mi], make_uint2(b[ni][0], b[ni][1]));
      }
    }
  }
}

// One K tile (BK floats) of a thread's TM x 8 float32 outputs by FFMA: rows ty + (BM / TM) * i (i < TM)
// of A (BM, BK), k fastest, rows kApitch apart; columns tx * 4 + j and BN / 2 + tx * 4 + j (j < 4) of B
// (BK, BN), n fastest, rows kBpitch apart. sums (TM * 8): each output's running sum, one FFMA chain
// in k order.
template <int BM, int BN, int BK, int TM, int kApitch, int kBpitch>
__device__ __forceinline__ void ffma_k_tile(const float* As, const float* Bs, int tx, int ty, float* sums) {
  constexpr int TY = BM / TM;
#pragma unroll
  for (int k = 0; k < BK; k += 4) {
    float4 a[TM];
#pragma unroll
    for (int i = 0; i < TM; ++i) a[i] = *reinterpret_cast<const float4*>(As + (ty + TY * i) * kApitch + k);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const float4 b0 = *reinterpret_cast<const float4*>(Bs + (k + kk) * kBpitch + tx * 4);
      const float4 b1 = *reinterpret_cast<const float4*>(Bs + (k + kk) * kBpitch + BN / 2 + tx * 4);
      const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const float av = kk == 0 ? a[i].x : kk == 1 ? a[i].y : kk == 2 ? a[i].z : a[i].w;
#pragma unroll
        for (int j = 0; j < 8; ++j) sums[i * 8 + j] = fmaf(av, b[j], sums[i * 8 + j]);
      }
    }
  }
}

}  // namespace gpu
}  // namespace facegen
