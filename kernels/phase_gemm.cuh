// phase_gemm.cuh: the generator's stride-2 5x5 transposed convolutions as implicit GEMMs, one per
// output parity ("phase"), so that no multiply touches an inserted zero.
//
// Output pixel (2*oy + py, 2*ox + px) of a phase reads input (oy + dy, ox + dx) through kernel tap
// (kh, kw): py = 0 uses kh in {1, 3}, py = 1 uses kh in {0, 2, 4}, with dy = (py + 1 - kh) / 2 (the
// same for x). The four phases use 4, 6, 6 and 9 of the 25 taps. For one phase:
//   A (M, K): M = images * H * W output positions, K = taps * C_IN; A(m, t*C_IN + c) = in(i, j, c)
//             at the input pixel of tap t, zero outside the map (gathered on the fly, never stored)
//   B (K, N): N = C_OUT; B(t*C_IN + c, k) = weight[kh][kw][k][c], rearranged once at load time
//   out(pixel of m, k) = relu(scale[k] * (A·B)(m, k) + shift[k])
// where scale and shift fold the convolution's bias and the next inference batch norm.
//
// Every output element is one thread's (or one tensor-core fragment's) sum over K in a fixed order,
// independent of the batch size and of the image's position in the batch: no split-K, no atomics.
//
// Three arithmetic flavours share the tile loader (cp.async, three stages):
//   Fp32: float32 FFMA, 8x8 outputs per thread.
//   Tf32: mma.sync m16n8k8 tf32, operands already rounded to tf32 in memory.
//   Bf16: mma.sync m16n8k16 bf16, activations and weights stored as bfloat16.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace facegen {
namespace gpu {

enum class Math { Fp32, Tf32, Bf16 };

template <Math M> struct MathTypes { using Act = float; };
template <> struct MathTypes<Math::Bf16> { using Act = __nv_bfloat16; };

// Taps of one phase along one axis, and the input offset of tap t (see the file comment).
__host__ __device__ constexpr int phase_taps(int parity) { return parity ? 3 : 2; }
__host__ __device__ constexpr int phase_kernel_index(int parity, int t) { return parity ? 2 * t : 2 * t + 1; }
__host__ __device__ constexpr int phase_offset(int parity, int t) {
  return (parity + 1 - phase_kernel_index(parity, t)) / 2;
}
// blockIdx.z order puts the 9-tap phase first so the longest blocks start first.
__host__ __device__ constexpr int phase_py(int z) { return 1 - z / 2; }
__host__ __device__ constexpr int phase_px(int z) { return 1 - z % 2; }
// Rows of B before phase z (B matrices of the four phases are stored one after another).
__host__ __device__ constexpr int phase_k_offset(int z, int c_in) {
  int k = 0;
  for (int q = 0; q < z; ++q) k += phase_taps(phase_py(q)) * phase_taps(phase_px(q)) * c_in;
  return k;
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  int bytes = valid ? 16 : 0;  // 0: fill the 16 bytes with zeros, read nothing
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
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

// Tile geometry of one kernel instance.
template <Math M, int BM_, int BN_> struct TileShape {
  static constexpr int BM = BM_;
  static constexpr int BN = BN_;
  static constexpr int kStages = 3;
  using Act = typename MathTypes<M>::Act;
  static constexpr int kElemsPerChunk = 16 / sizeof(Act);    // one cp.async moves 16 bytes
  static constexpr int BK = 128 / sizeof(Act);               // 128-byte rows: 32 floats or 64 bf16
  static constexpr int kChunksPerRow = BK / kElemsPerChunk;  // 8
  static constexpr int kThreads = (M == Math::Fp32) ? BM * BN / 64 : 256;
  // A stage: (BM, BK + pad) k fastest. B stage: fp32/tf32 (BK, BN + 8) n fastest; bf16 (BN, BK + 8) k fastest.
  static constexpr int kApitch = BK + kElemsPerChunk;
  static constexpr int kBpitch = (M == Math::Bf16) ? BK + 8 : BN + 8;
  static constexpr int kAElems = BM * kApitch;
  static constexpr int kBElems = (M == Math::Bf16) ? BN * kBpitch : BK * kBpitch;
  static constexpr int kStageBytes = (kAElems + kBElems) * static_cast<int>(sizeof(Act));
  static constexpr int kSmemBytes = kStages * kStageBytes;
  static constexpr int kARowsPerThread = BM * kChunksPerRow / kThreads;
  static constexpr int kBChunks = (M == Math::Bf16) ? BN * kChunksPerRow : BK * BN / 4;
  static constexpr int kBChunksPerThread = kBChunks / kThreads;
  static_assert(kBChunks % kThreads == 0, "B tile chunks must divide among threads");
  static_assert((BM * kChunksPerRow) % kThreads == 0, "A tile chunks must divide among threads");
};

template <Math M, int C_IN, int C_OUT, int H, int BM, int BN>
__global__ void __launch_bounds__(TileShape<M, BM, BN>::kThreads, TileShape<M, BM, BN>::kThreads == 128 ? 2 : 1)
tconv_phase_gemm(const typename MathTypes<M>::Act* __restrict__ in,  // (n, H, H, C_IN)
                 const typename MathTypes<M>::Act* __restrict__ weight,  // four phases' B, see above
                 const float* __restrict__ scale, const float* __restrict__ shift,  // (C_OUT)
                 typename MathTypes<M>::Act* __restrict__ out,  // (n, 2H, 2H, C_OUT)
                 int m_total) {                                  // n * H * H
  using S = TileShape<M, BM, BN>;
  using Act = typename S::Act;
  constexpr int BK = S::BK;
  constexpr int NT = S::kThreads;
  static_assert(C_IN % BK == 0, "a K tile must stay inside one tap");
  static_assert(C_OUT % BN == 0, "N tiles must cover C_OUT exactly");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Act* smem = reinterpret_cast<Act*>(smem_raw);

  const int tid = threadIdx.x;
  const int z = blockIdx.z;
  const int py = phase_py(z), px = phase_px(z);
  const int ntx = phase_taps(px);
  const int k_total = phase_taps(py) * ntx * C_IN;
  const int num_k_tiles = k_total / BK;
  const int m0 = blockIdx.x * BM;
  const int n0 = blockIdx.y * BN;

  // This thread's A rows: (tid / 8) + (NT / 8) * r, always in chunk column tid % 8.
  const int a_chunk = tid % S::kChunksPerRow;
  const Act* a_base[S::kARowsPerThread];
  int a_oy[S::kARowsPerThread], a_ox[S::kARowsPerThread];
#pragma unroll
  for (int r = 0; r < S::kARowsPerThread; ++r) {
    int m = m0 + tid / S::kChunksPerRow + (NT / S::kChunksPerRow) * r;
    bool ok = m < m_total;
    int img = m / (H * H), pix = m % (H * H);
    a_base[r] = in + static_cast<int64_t>(img) * H * H * C_IN + a_chunk * S::kElemsPerChunk;
    a_oy[r] = ok ? pix / H : -1000;  // far outside: every tap invalid
    a_ox[r] = pix % H;
  }
  const Act* b_phase = weight + static_cast<int64_t>(phase_k_offset(z, C_IN)) * C_OUT;

  auto load_tile = [&](int stage, int kt) {
    Act* As = smem + stage * (S::kAElems + S::kBElems);
    Act* Bs = As + S::kAElems;
    const int k0 = kt * BK;
    const int tap = k0 / C_IN, c0 = k0 % C_IN;
    const int dy = phase_offset(py, tap / ntx), dx = phase_offset(px, tap % ntx);
#pragma unroll
    for (int r = 0; r < S::kARowsPerThread; ++r) {
      int iy = a_oy[r] + dy, ix = a_ox[r] + dx;
      bool valid = iy >= 0 && iy < H && ix >= 0 && ix < H;
      const Act* src = valid ? a_base[r] + (iy * H + ix) * C_IN + c0 : in;
      int row = tid / S::kChunksPerRow + (NT / S::kChunksPerRow) * r;
      cp_async16(As + row * S::kApitch + a_chunk * S::kElemsPerChunk, src, valid);
    }
#pragma unroll
    for (int r = 0; r < S::kBChunksPerThread; ++r) {
      int q = tid + NT * r;
      if constexpr (M == Math::Bf16) {  // B stored (C_OUT, k_total) per phase, k fastest
        int nrow = q / S::kChunksPerRow, ch = q % S::kChunksPerRow;
        const Act* src = b_phase + static_cast<int64_t>(n0 + nrow) * k_total + k0 + ch * S::kElemsPerChunk;
        cp_async16(Bs + nrow * S::kBpitch + ch * S::kElemsPerChunk, src, true);
      } else {  // B stored (k_total, C_OUT) per phase, n fastest
        int krow = q / (BN / 4), ch = q % (BN / 4);
        const Act* src = b_phase + static_cast<int64_t>(k0 + krow) * C_OUT + n0 + ch * 4;
        cp_async16(Bs + krow * S::kBpitch + ch * 4, src, true);
      }
    }
  };

  // Accumulators and the per-flavour inner product over one K tile.
  constexpr int kWarpsM = 4;
  constexpr int WN = BN / 2;         // tensor-core flavours: 4 x 2 warps, warp tile 32 x WN
  constexpr int NI = WN / 8;
  constexpr int kAccs = (M == Math::Fp32) ? 64 : 2 * NI * 4;
  float acc[kAccs];
#pragma unroll
  for (int i = 0; i < kAccs; ++i) acc[i] = 0.f;

  const int lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t4 = lane % 4;
  const int warp_m = warp % kWarpsM, warp_n = warp / kWarpsM;
  constexpr int TX = BN / 8;  // fp32: threads along n
  constexpr int TY = BM / 8;  // fp32: threads along m
  const int tx = tid % TX, ty = tid / TX;

  auto compute_tile = [&](int stage) {
    const Act* As = smem + stage * (S::kAElems + S::kBElems);
    const Act* Bs = As + S::kAElems;
    if constexpr (M == Math::Fp32) {
      // rows ty + TY*i, columns tx*4 + j and BN/2 + tx*4 + j
#pragma unroll
      for (int k = 0; k < BK; k += 4) {
        float4 a[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) a[i] = *reinterpret_cast<const float4*>(As + (ty + TY * i) * S::kApitch + k);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          float4 b0 = *reinterpret_cast<const float4*>(Bs + (k + kk) * S::kBpitch + tx * 4);
          float4 b1 = *reinterpret_cast<const float4*>(Bs + (k + kk) * S::kBpitch + BN / 2 + tx * 4);
          float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            float av = kk == 0 ? a[i].x : kk == 1 ? a[i].y : kk == 2 ? a[i].z : a[i].w;
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[i * 8 + j] = fmaf(av, b[j], acc[i * 8 + j]);
          }
        }
      }
    } else if constexpr (M == Math::Tf32) {
      const float* Af = reinterpret_cast<const float*>(As);
      const float* Bf = reinterpret_cast<const float*>(Bs);
#pragma unroll
      for (int k = 0; k < BK; k += 8) {
        uint32_t a[2][4];
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          const float* p = Af + (warp_m * 32 + mi * 16 + g) * S::kApitch + k + t4;
          a[mi][0] = __float_as_uint(p[0]);
          a[mi][1] = __float_as_uint(p[8 * S::kApitch]);
          a[mi][2] = __float_as_uint(p[4]);
          a[mi][3] = __float_as_uint(p[8 * S::kApitch + 4]);
        }
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
          const float* p = Bf + (k + t4) * S::kBpitch + warp_n * WN + ni * 8 + g;
          uint32_t b0 = __float_as_uint(p[0]), b1 = __float_as_uint(p[4 * S::kBpitch]);
#pragma unroll
          for (int mi = 0; mi < 2; ++mi) {
            float* c = acc + (mi * NI + ni) * 4;
            asm volatile(
                "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                "{%8,%9}, {%0,%1,%2,%3};\n"
                : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                : "r"(a[mi][0]), "r"(a[mi][1]), "r"(a[mi][2]), "r"(a[mi][3]), "r"(b0), "r"(b1));
          }
        }
      }
    } else {
#pragma unroll
      for (int k = 0; k < BK; k += 16) {
        uint32_t a[2][4];
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          const Act* p = As + (warp_m * 32 + mi * 16 + g) * S::kApitch + k + 2 * t4;
          a[mi][0] = *reinterpret_cast<const uint32_t*>(p);
          a[mi][1] = *reinterpret_cast<const uint32_t*>(p + 8 * S::kApitch);
          a[mi][2] = *reinterpret_cast<const uint32_t*>(p + 8);
          a[mi][3] = *reinterpret_cast<const uint32_t*>(p + 8 * S::kApitch + 8);
        }
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
          const Act* p = Bs + (warp_n * WN + ni * 8 + g) * S::kBpitch + k + 2 * t4;
          uint32_t b0 = *reinterpret_cast<const uint32_t*>(p);
          uint32_t b1 = *reinterpret_cast<const uint32_t*>(p + 8);
#pragma unroll
          for (int mi = 0; mi < 2; ++mi) {
            float* c = acc + (mi * NI + ni) * 4;
            asm volatile(
                "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                "{%8,%9}, {%0,%1,%2,%3};\n"
                : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                : "r"(a[mi][0]), "r"(a[mi][1]), "r"(a[mi][2]), "r"(a[mi][3]), "r"(b0), "r"(b1));
          }
        }
      }
    }
  };

  // Three-stage cp.async pipeline: tiles kt+1 and kt+2 load while tile kt is multiplied.
#pragma unroll
  for (int s = 0; s < S::kStages - 1; ++s) {
    if (s < num_k_tiles) load_tile(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < num_k_tiles; ++kt) {
    cp_async_wait<S::kStages - 2>();
    __syncthreads();
    int next = kt + S::kStages - 1;
    if (next < num_k_tiles) load_tile(next % S::kStages, next);
    cp_async_commit();
    compute_tile(kt % S::kStages);
  }
  cp_async_wait<0>();

  // Epilogue: relu(scale * acc + shift) into the phase's output pixels.
  auto out_ptr = [&](int m) -> Act* {
    int img = m / (H * H), pix = m % (H * H);
    int oy = pix / H, ox = pix % H;
    int64_t p = (static_cast<int64_t>(img) * 2 * H + 2 * oy + py) * 2 * H + 2 * ox + px;
    return out + p * C_OUT;
  };
  if constexpr (M == Math::Fp32) {
    float sc[8], sh[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      int n = n0 + (j / 4) * (BN / 2) + tx * 4 + j % 4;
      sc[j] = scale[n];
      sh[j] = shift[n];
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      int m = m0 + ty + TY * i;
      if (m >= m_total) continue;
      float* o = out_ptr(m) + n0 + tx * 4;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = fmaxf(fmaf(acc[i * 8 + h * 4 + j], sc[h * 4 + j], sh[h * 4 + j]), 0.f);
        Store<M>::four(o + h * (BN / 2), make_float4(v[0], v[1], v[2], v[3]));
      }
    }
  } else {
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        int m = m0 + warp_m * 32 + mi * 16 + g + half * 8;
        if (m >= m_total) continue;
        Act* o = out_ptr(m);
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
          int n = n0 + warp_n * WN + ni * 8 + 2 * t4;
          const float* c = acc + (mi * NI + ni) * 4 + half * 2;
          float v0 = fmaxf(fmaf(c[0], scale[n], shift[n]), 0.f);
          float v1 = fmaxf(fmaf(c[1], scale[n + 1], shift[n + 1]), 0.f);
          Store<M>::two(o + n, v0, v1);
        }
      }
    }
  }
}

// Projection z (n, 100) · W (100, 8192) with the first batch norm and ReLU folded into the epilogue:
// out(img, j) = relu(scale[j] * sum_k z(img, k) W(k, j) + shift[j]). Float32 FFMA in every flavour
// (0.5% of the network's work); the output is stored in the flavour's activation type.
constexpr int kProjImagesPerBlock = 32;
constexpr int kProjColumnsPerBlock = 256;

template <Math M>
__global__ void __launch_bounds__(kProjColumnsPerBlock)
projection_bn_relu(const float* __restrict__ z, int n, int k_in, int k_out,
                   const float* __restrict__ weight, const float* __restrict__ scale,
                   const float* __restrict__ shift, typename MathTypes<M>::Act* __restrict__ out) {
  constexpr int kMaxK = 128;
  __shared__ __align__(16) float zs[kProjImagesPerBlock][kMaxK];
  const int img0 = blockIdx.y * kProjImagesPerBlock;
  for (int q = threadIdx.x; q < kProjImagesPerBlock * k_in; q += blockDim.x) {
    int i = q / k_in, k = q % k_in;
    zs[i][k] = img0 + i < n ? z[static_cast<int64_t>(img0 + i) * k_in + k] : 0.f;
  }
  __syncthreads();
  const int j = blockIdx.x * kProjColumnsPerBlock + threadIdx.x;
  if (j >= k_out) return;
  float acc[kProjImagesPerBlock];
#pragma unroll
  for (int i = 0; i < kProjImagesPerBlock; ++i) acc[i] = 0.f;
  // k in steps of 4 so one 16-byte shared load feeds four FMAs (k_in % 4 == 0, checked by the caller);
  // the sum still runs over k in ascending order.
  for (int k = 0; k < k_in; k += 4) {
    float w[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) w[e] = weight[static_cast<int64_t>(k + e) * k_out + j];
#pragma unroll
    for (int i = 0; i < kProjImagesPerBlock; ++i) {
      float4 zv = *reinterpret_cast<const float4*>(&zs[i][k]);
      acc[i] = fmaf(zv.x, w[0], acc[i]);
      acc[i] = fmaf(zv.y, w[1], acc[i]);
      acc[i] = fmaf(zv.z, w[2], acc[i]);
      acc[i] = fmaf(zv.w, w[3], acc[i]);
    }
  }
  const float sc = scale[j], sh = shift[j];
#pragma unroll
  for (int i = 0; i < kProjImagesPerBlock; ++i) {
    if (img0 + i >= n) break;
    float v = fmaxf(fmaf(acc[i], sc, sh), 0.f);
    int64_t o = static_cast<int64_t>(img0 + i) * k_out + j;
    if constexpr (M == Math::Bf16) out[o] = __float2bfloat16_rn(v);
    else if constexpr (M == Math::Tf32) out[o] = round_tf32(v);
    else out[o] = v;
  }
}

// The last transposed convolution (64 -> 3 channels, 32x32 -> 64x64) with bias and tanh, direct:
// one block per (image, kOutRowGroup input rows) makes output rows 2*oy and 2*oy + 1 for those rows,
// with the weights loaded into shared memory once per block and each weight load reused for
// kOutRowGroup rows. Each warp holds one phase so tap and weight addresses are warp-uniform.
// Float32 FFMA, weights in float32, taps then channels in a fixed order.
constexpr int kOutCin = 64, kOutCout = 3, kOutHin = 32, kOutRowGroup = 4;
constexpr int kOutPitch = kOutCin + 4;
constexpr int kOutSmemBytes =
    sizeof(float) * ((kOutRowGroup + 2) * (kOutHin + 2) * kOutPitch + 25 * kOutCout * kOutCin);

template <Math M>
__global__ void __launch_bounds__(128)
tconv_output_tanh(const typename MathTypes<M>::Act* __restrict__ in,  // (n, 32, 32, 64)
                  const float* __restrict__ weight,                   // (5, 5, 3, 64)
                  const float* __restrict__ bias,                     // (3)
                  float* __restrict__ out) {                          // (n, 64, 64, 3)
  extern __shared__ __align__(16) float out_smem[];
  float* w_s = out_smem;                           // (25, 3, 64)
  float* in_s = out_smem + 25 * kOutCout * kOutCin;  // (rows oy0-1 .. oy0+G, columns -1..32, kOutPitch)
  const int oy0 = blockIdx.x * kOutRowGroup, img = blockIdx.y;
  for (int q = threadIdx.x; q < 25 * kOutCout * kOutCin / 4; q += blockDim.x)
    reinterpret_cast<float4*>(w_s)[q] = reinterpret_cast<const float4*>(weight)[q];
  constexpr int kRows = kOutRowGroup + 2;
  for (int q = threadIdx.x; q < kRows * (kOutHin + 2) * kOutCin; q += blockDim.x) {
    int c = q % kOutCin, x = (q / kOutCin) % (kOutHin + 2), r = q / (kOutCin * (kOutHin + 2));
    int iy = oy0 + r - 1, ix = x - 1;
    float v = 0.f;
    if (iy >= 0 && iy < kOutHin && ix >= 0 && ix < kOutHin) {
      auto e = in[((static_cast<int64_t>(img) * kOutHin + iy) * kOutHin + ix) * kOutCin + c];
      v = static_cast<float>(e);
    }
    in_s[(r * (kOutHin + 2) + x) * kOutPitch + c] = v;
  }
  __syncthreads();
  const int py = threadIdx.x >> 6, px = (threadIdx.x >> 5) & 1, ox = threadIdx.x & 31;
  float acc[kOutRowGroup][kOutCout] = {};
  for (int ty = 0; ty < phase_taps(py); ++ty) {
    const int kh = phase_kernel_index(py, ty), r = phase_offset(py, ty) + 1;
    for (int tx = 0; tx < phase_taps(px); ++tx) {
      const int kw = phase_kernel_index(px, tx), x = ox + phase_offset(px, tx) + 1;
      const float4* ip = reinterpret_cast<const float4*>(in_s + (r * (kOutHin + 2) + x) * kOutPitch);
      const float4* wp = reinterpret_cast<const float4*>(w_s + (kh * 5 + kw) * kOutCout * kOutCin);
#pragma unroll 2
      for (int c4 = 0; c4 < kOutCin / 4; ++c4) {
        float4 w[kOutCout];
#pragma unroll
        for (int k = 0; k < kOutCout; ++k) w[k] = wp[k * (kOutCin / 4) + c4];
#pragma unroll
        for (int g = 0; g < kOutRowGroup; ++g) {
          float4 v = ip[g * (kOutHin + 2) * kOutPitch / 4 + c4];
#pragma unroll
          for (int k = 0; k < kOutCout; ++k) {
            acc[g][k] = fmaf(v.x, w[k].x, acc[g][k]);
            acc[g][k] = fmaf(v.y, w[k].y, acc[g][k]);
            acc[g][k] = fmaf(v.z, w[k].z, acc[g][k]);
            acc[g][k] = fmaf(v.w, w[k].w, acc[g][k]);
          }
        }
      }
    }
  }
  const int x = 2 * ox + px;
#pragma unroll
  for (int g = 0; g < kOutRowGroup; ++g) {
    const int y = 2 * (oy0 + g) + py;
    float* o = out + ((static_cast<int64_t>(img) * 64 + y) * 64 + x) * kOutCout;
#pragma unroll
    for (int k = 0; k < kOutCout; ++k) o[k] = tanhf(acc[g][k] + bias[k]);
  }
}

}  // namespace gpu
}  // namespace facegen
