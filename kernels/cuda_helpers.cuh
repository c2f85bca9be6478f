// cuda_helpers.cuh: the CUDA building blocks the GPU layers share: the arithmetic flavour a precision
// runs in (Math) and the dispatch from it to a kernel's template argument, the types stored in each
// flavour, the cp.async tile loads, ldmatrix, tf32 rounding and splitting, the epilogue stores, one
// mma.sync step (and the three of a float32 step on tensor cores), and one K tile of the inner loops
// every GEMM-shaped layer runs: a warp's mma.sync fragments (tf32, bf16, or float32 as three tf32
// products), or a thread's float32 FFMA block.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include "common/precision.hpp"

namespace facegen {
namespace gpu {

// Fp32: float32 FFMA. Tf32, Bf16: mma.sync / wgmma on operands of that type. Tf32x3: float32 on
// tensor cores, each operand split into two tf32 parts and three products per term (below,
// mma_tf32x3_step); it stores plain float32 activations, as Fp32 does. --precision fp32 runs Tf32x3 or
// Fp32 (DeviceNetwork chooses; kernels/generator_gpu.hpp), tf32 and bf16 their own.
enum class Math { Fp32, Tf32, Bf16, Tf32x3 };

// with_math(math, f): calls f(MathConstant<M>{}) with M = math; f reads M as decltype(m)::value. The
// one place where a network's arithmetic becomes a kernel's template argument. with_ffma_math does the
// same for the layers whose FFMA kernels serve several flavours: Tf32x3 stores plain float32, so it
// runs Fp32's FFMA kernels there (no Tf32x3 instance of them is compiled).
template <Math M> using MathConstant = std::integral_constant<Math, M>;
template <class F>
void with_math(Math math, F&& f) {
  switch (math) {
    case Math::Fp32: f(MathConstant<Math::Fp32>{}); return;
    case Math::Tf32: f(MathConstant<Math::Tf32>{}); return;
    case Math::Bf16: f(MathConstant<Math::Bf16>{}); return;
    case Math::Tf32x3: f(MathConstant<Math::Tf32x3>{}); return;
  }
  throw std::logic_error("with_math: not a Math");
}
template <class F>
void with_ffma_math(Math math, F&& f) {
  switch (math) {
    case Math::Fp32:
    case Math::Tf32x3: f(MathConstant<Math::Fp32>{}); return;
    case Math::Tf32: f(MathConstant<Math::Tf32>{}); return;
    case Math::Bf16: f(MathConstant<Math::Bf16>{}); return;
  }
  throw std::logic_error("with_ffma_math: not a Math");
}
// The flavour of a precision: fp32 on tensor cores (Tf32x3) where fp32_on_tensor_cores, else FFMA.
inline Math math_of(Precision precision, bool fp32_on_tensor_cores) {
  switch (precision) {
    case Precision::Fp32: return fp32_on_tensor_cores ? Math::Tf32x3 : Math::Fp32;
    case Precision::Tf32: return Math::Tf32;
    case Precision::Bf16: return Math::Bf16;
  }
  throw std::logic_error("math_of: not a precision");
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

// A float32 x (as the bits an mma register holds) as two tf32 values: hi = tf32(x), lo = tf32(x - hi),
// so x = hi + lo to within 2^-22 |x| (x - hi is exact in float32). tf32 keeps float32's exponent
// range, so lo only underflows where |x| < 2^-115 or so.
__device__ __forceinline__ void split_tf32(uint32_t x, uint32_t& hi, uint32_t& lo) {
  const float f = __uint_as_float(x);
  const float h = round_tf32(f);
  hi = __float_as_uint(h);
  lo = __float_as_uint(round_tf32(f - h));
}

template <Math M> struct Store;
template <> struct Store<Math::Fp32> {
  static __device__ __forceinline__ void two(float* p, float a, float b) { *reinterpret_cast<float2*>(p) = make_float2(a, b); }
  static __device__ __forceinline__ void four(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
};
template <> struct Store<Math::Tf32x3> : Store<Math::Fp32> {};
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

// One k step of float32 on tensor cores for one 16 x 8 fragment: the step's products
//   fresh = lo(a) hi(b) + hi(a) lo(b) + hi(a) hi(b)     (lo(a) lo(b), under 2^-22 of a product, dropped)
// as three mma.sync m16n8k8 into a zeroed accumulator, the small products first, then sum += fresh
// in round-to-nearest float32. The tensor cores truncate toward zero when they add into their
// accumulator (bench/mma_rounding.cuh measured it); chaining the mmas of a whole K that way made the
// error tens of times FFMA's in bench/split_products.cpp's emulation; this order matched FFMA's.
__device__ __forceinline__ void mma_tf32x3_step(float* sum, const uint32_t (&a_hi)[4], const uint32_t (&a_lo)[4],
                                                uint2 b_hi, uint2 b_lo) {
  float fresh[4] = {0.f, 0.f, 0.f, 0.f};
  mma_sync_step<Math::Tf32>(fresh, a_lo, b_hi);
  mma_sync_step<Math::Tf32>(fresh, a_hi, b_lo);
  mma_sync_step<Math::Tf32>(fresh, a_hi, b_hi);
#pragma unroll
  for (int i = 0; i < 4; ++i) sum[i] += fresh[i];
}

// One mma k step's fragments of a warp's MI x NI tile from shared memory by ldmatrix (layouts as in
// mma_k_tile below), k elements into the K tile.
template <int MI, int NI, int kApitch, int kBpitch, class Act>
__device__ __forceinline__ void load_mma_fragments(const Act* As, const Act* Bs, int a_ld, int b_ld, int k,
                                                   uint32_t (&a)[MI][4], uint32_t (&b)[NI][2]) {
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
    load_mma_fragments<MI, NI, kApitch, kBpitch>(As, Bs, a_ld, b_ld, k, a, b);
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

// The same K tile in float32 on tensor cores: float32 A and B in the tf32 layout (k steps of 8), each
// fragment split into tf32 parts once per k step, each output's step added into sums (MI * NI * 4,
// mma.sync's register layout) by mma_tf32x3_step. Registers: sums and the caller's totals take 2 * MI *
// NI * 4; so that the rest fits, B's parts are held for the k step and A's one 16-row block at a time,
// and the k steps are not unrolled (unrolled, the compiler hoisted the next steps' loads and spilled).
template <int MI, int NI, int BK, int kApitch, int kBpitch>
__device__ __forceinline__ void mma_tf32x3_k_tile(const float* As, const float* Bs, int a_ld, int b_ld, float* sums) {
#pragma unroll 1
  for (int k = 0; k < BK; k += 8) {
    uint2 b_hi[NI], b_lo[NI];
#pragma unroll
    for (int nj = 0; nj < NI / 2; ++nj) {
      uint32_t r[4];
      ldmatrix_x4(r, Bs + b_ld + nj * 16 * kBpitch + k);
      split_tf32(r[0], b_hi[2 * nj].x, b_lo[2 * nj].x);
      split_tf32(r[1], b_hi[2 * nj].y, b_lo[2 * nj].y);
      split_tf32(r[2], b_hi[2 * nj + 1].x, b_lo[2 * nj + 1].x);
      split_tf32(r[3], b_hi[2 * nj + 1].y, b_lo[2 * nj + 1].y);
    }
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
      uint32_t a[4], a_hi[4], a_lo[4];
      ldmatrix_x4(a, As + a_ld + mi * 16 * kApitch + k);
#pragma unroll
      for (int r = 0; r < 4; ++r) split_tf32(a[r], a_hi[r], a_lo[r]);
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) mma_tf32x3_step(sums + (mi * NI + ni) * 4, a_hi, a_lo, b_hi[ni], b_lo[ni]);
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
