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
//   Fp32: float32 FFMA, TM x 8 outputs per thread (TM = 8 or 4).
//   Tf32: mma.sync m16n8k8 tf32, operands already rounded to tf32 in memory.
//   Bf16: mma.sync m16n8k16 bf16, activations and weights stored as bfloat16.
// The tensor-core flavours run 4 warps (2 x 2) of 64 x BN/2 outputs each and read their fragments
// with ldmatrix; B is stored (C_OUT, K), K fastest, so A and B fragments are both plain (non-
// transposed) ldmatrix reads of 16-byte rows. Larger warp tiles read fewer shared-memory bytes per
// multiply (64x64: 128 rows of A and B per 4096 outputs, against 96 per 2048 for 32x64).
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

// Tile geometry of one kernel instance. TM: fp32 rows per thread (threads own TM x 8 outputs); the
// tensor-core flavours take TM = 8 only.
template <Math M, int BM_, int BN_, int STAGES_ = 3, int TM_ = 8> struct TileShape {
  static constexpr int BM = BM_;
  static constexpr int BN = BN_;
  static constexpr int kStages = STAGES_;
  static constexpr int TM = TM_;
  static_assert(M == Math::Fp32 ? (TM == 8 || TM == 4) && BM % TM == 0 : TM == 8,
                "fp32 takes TM = 8 or 4 rows per thread, the tensor-core flavours TM = 8");
  using Act = typename MathTypes<M>::Act;
  static constexpr int kElemsPerChunk = 16 / sizeof(Act);    // one cp.async moves 16 bytes
  static constexpr int BK = 128 / sizeof(Act);               // 128-byte rows: 32 floats or 64 bf16
  static constexpr int kChunksPerRow = BK / kElemsPerChunk;  // 8
  static constexpr bool kNK = M != Math::Fp32;  // B stage (BN, BK) k fastest; fp32: (BK, BN) n fastest
  // Tensor-core flavours: 4 warps, 2 x 2 of 64 x BN/2 (BM = 128), or 4 x 1 of 64 x BN (BM = 256).
  static constexpr int kWarpsM = BM >= 256 ? 4 : 2, kWarpsN = 4 / kWarpsM;
  static constexpr int kThreads = (M == Math::Fp32) ? BM * BN / (TM * 8) : 32 * kWarpsM * kWarpsN;
  // A stage: (BM, BK + 16 bytes) k fastest; rows 144 bytes apart, so the 8 rows of an ldmatrix read
  // fall in 8 different 16-byte bank groups. B stage: (BN, BK + 16 bytes) or fp32 (BK, BN + 8).
  static constexpr int kApitch = BK + kElemsPerChunk;
  static constexpr int kBpitch = kNK ? BK + kElemsPerChunk : BN + 8;
  static constexpr int kAElems = BM * kApitch;
  static constexpr int kBElems = kNK ? BN * kBpitch : BK * kBpitch;
  static constexpr int kStageBytes = (kAElems + kBElems) * static_cast<int>(sizeof(Act));
  static constexpr int kSmemBytes = kStages * kStageBytes;
  static constexpr int kARowsPerThread = BM * kChunksPerRow / kThreads;
  static constexpr int kBChunks = kNK ? BN * kChunksPerRow : BK * BN / 4;
  static constexpr int kBChunksPerThread = kBChunks / kThreads;
  static_assert(kBChunks % kThreads == 0, "B tile chunks must divide among threads");
  static_assert((BM * kChunksPerRow) % kThreads == 0, "A tile chunks must divide among threads");
};

template <Math M, int C_IN, int C_OUT, int H, int BM, int BN, int STAGES = 3, int TM = 8>
__global__ void __launch_bounds__(TileShape<M, BM, BN, STAGES, TM>::kThreads,
                                  TileShape<M, BM, BN, STAGES, TM>::kThreads == 128 ? 2 : 1)
tconv_phase_gemm(const typename MathTypes<M>::Act* __restrict__ in,  // (n, H, H, C_IN)
                 const typename MathTypes<M>::Act* __restrict__ weight,  // four phases' B, see above
                 const float* __restrict__ scale, const float* __restrict__ shift,  // (C_OUT)
                 typename MathTypes<M>::Act* __restrict__ out,  // (n, 2H, 2H, C_OUT)
                 int m_total) {                                  // n * H * H
  using S = TileShape<M, BM, BN, STAGES, TM>;
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
      if constexpr (S::kNK) {  // B stored (C_OUT, k_total) per phase, k fastest
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
  constexpr int WM = BM / S::kWarpsM;  // tensor-core flavours: warp tile WM x WN
  constexpr int WN = BN / S::kWarpsN;
  constexpr int MI = WM / 16;
  constexpr int NI = WN / 8;
  static_assert(M == Math::Fp32 || (WM % 16 == 0 && NI % 2 == 0), "warp tile must be whole ldmatrix blocks");
  constexpr int kAccs = (M == Math::Fp32) ? TM * 8 : MI * NI * 4;
  float acc[kAccs];
#pragma unroll
  for (int i = 0; i < kAccs; ++i) acc[i] = 0.f;

  const int lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t4 = lane % 4;
  const int warp_m = warp % S::kWarpsM, warp_n = warp / S::kWarpsM;
  constexpr int TX = BN / 8;  // fp32: threads along n
  constexpr int TY = BM / TM;  // fp32: threads along m
  const int tx = tid % TX, ty = tid / TX;
  // ldmatrix row addresses of this lane (in elements, within a stage). A x4: matrices (rows 0-7 | 8-15)
  // x (k half 0 | 1) of a 16-row block. B x4: (n block ni: k half 0 | 1, n block ni + 1: k half 0 | 1).
  constexpr int kHalfK = 16 / static_cast<int>(sizeof(Act));  // elements in 16 bytes: 8 bf16, 4 tf32
  const int a_ld = (warp_m * WM + lane % 16) * S::kApitch + (lane / 16) * kHalfK;
  const int b_ld = (warp_n * WN + lane % 8 + (lane / 16) * 8) * S::kBpitch + ((lane / 8) % 2) * kHalfK;

  auto compute_tile = [&](int stage) {
    const Act* As = smem + stage * (S::kAElems + S::kBElems);
    const Act* Bs = As + S::kAElems;
    if constexpr (M == Math::Fp32) {
      // rows ty + TY*i (i < TM), columns tx*4 + j and BN/2 + tx*4 + j
#pragma unroll
      for (int k = 0; k < BK; k += 4) {
        float4 a[TM];
#pragma unroll
        for (int i = 0; i < TM; ++i) a[i] = *reinterpret_cast<const float4*>(As + (ty + TY * i) * S::kApitch + k);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          float4 b0 = *reinterpret_cast<const float4*>(Bs + (k + kk) * S::kBpitch + tx * 4);
          float4 b1 = *reinterpret_cast<const float4*>(Bs + (k + kk) * S::kBpitch + BN / 2 + tx * 4);
          float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
          for (int i = 0; i < TM; ++i) {
            float av = kk == 0 ? a[i].x : kk == 1 ? a[i].y : kk == 2 ? a[i].z : a[i].w;
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[i * 8 + j] = fmaf(av, b[j], acc[i * 8 + j]);
          }
        }
      }
    } else {
      // One mma k step: 8 tf32 or 16 bf16, i.e. two 16-byte halves of each fragment row.
      constexpr int KS = 2 * kHalfK;
#pragma unroll
      for (int k = 0; k < BK; k += KS) {
        uint32_t a[MI][4], b[NI][2];
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) ldmatrix_x4(a[mi], As + a_ld + mi * 16 * S::kApitch + k);
#pragma unroll
        for (int nj = 0; nj < NI / 2; ++nj) {
          uint32_t r[4];
          ldmatrix_x4(r, Bs + b_ld + nj * 16 * S::kBpitch + k);
          b[2 * nj][0] = r[0];
          b[2 * nj][1] = r[1];
          b[2 * nj + 1][0] = r[2];
          b[2 * nj + 1][1] = r[3];
        }
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
          for (int ni = 0; ni < NI; ++ni) {
            float* c = acc + (mi * NI + ni) * 4;
            if constexpr (M == Math::Tf32) {
              asm volatile(
                  "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                  "{%8,%9}, {%0,%1,%2,%3};\n"
                  : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                  : "r"(a[mi][0]), "r"(a[mi][1]), "r"(a[mi][2]), "r"(a[mi][3]), "r"(b[ni][0]), "r"(b[ni][1]));
            } else {
              asm volatile(
                  "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                  "{%8,%9}, {%0,%1,%2,%3};\n"
                  : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                  : "r"(a[mi][0]), "r"(a[mi][1]), "r"(a[mi][2]), "r"(a[mi][3]), "r"(b[ni][0]), "r"(b[ni][1]));
            }
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
    for (int i = 0; i < TM; ++i) {
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
    for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        int m = m0 + warp_m * WM + mi * 16 + g + half * 8;
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
// (0.5% of the network's work); the output is stored in the flavour's activation type. Each thread
// makes two adjacent columns for 32 images, so one 16-byte broadcast of z feeds eight FMAs per
// column pair and the weights arrive as coalesced 8-byte loads.
constexpr int kProjImagesPerBlock = 32;
constexpr int kProjThreads = 256;
constexpr int kProjColumnsPerBlock = 2 * kProjThreads;

template <Math M>
__global__ void __launch_bounds__(kProjThreads)
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
  const int j = blockIdx.x * kProjColumnsPerBlock + 2 * threadIdx.x;  // columns j, j + 1 (k_out even)
  if (j >= k_out) return;
  float acc[kProjImagesPerBlock][2];
#pragma unroll
  for (int i = 0; i < kProjImagesPerBlock; ++i) acc[i][0] = acc[i][1] = 0.f;
  // k in steps of 4 so one 16-byte shared load feeds eight FMAs (k_in % 4 == 0, checked by the caller);
  // each sum still runs over k in ascending order.
  for (int k = 0; k < k_in; k += 4) {
    float2 w[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) w[e] = *reinterpret_cast<const float2*>(weight + static_cast<int64_t>(k + e) * k_out + j);
#pragma unroll
    for (int i = 0; i < kProjImagesPerBlock; ++i) {
      float4 zv = *reinterpret_cast<const float4*>(&zs[i][k]);
      const float zk[4] = {zv.x, zv.y, zv.z, zv.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        acc[i][0] = fmaf(zk[e], w[e].x, acc[i][0]);
        acc[i][1] = fmaf(zk[e], w[e].y, acc[i][1]);
      }
    }
  }
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    const float sc = scale[j + c], sh = shift[j + c];
#pragma unroll
    for (int i = 0; i < kProjImagesPerBlock; ++i) {
      if (img0 + i >= n) break;
      float v = fmaxf(fmaf(acc[i][c], sc, sh), 0.f);
      int64_t o = static_cast<int64_t>(img0 + i) * k_out + j + c;
      if constexpr (M == Math::Bf16) out[o] = __float2bfloat16_rn(v);
      else if constexpr (M == Math::Tf32) out[o] = round_tf32(v);
      else out[o] = v;
    }
  }
}

// The last transposed convolution (64 -> 3 channels, 32x32 -> 64x64) with bias and tanh, direct, in
// float32 FFMA with float32 weights in every precision.
//
// With only 3 output channels, a thread that makes one output pixel does 3 FMAs per input value it
// loads: any such kernel is bound by shared-memory loads, not by the FMAs. The reuse is in the
// convolution itself: an input pixel feeds 25 (output pixel, tap) pairs. So each thread makes the
// whole 2x2 output block (all four phases) of kOutRowsPerThread input positions in one column: per
// four channels it loads the (rows + 2) x 3 input pixels around them once into registers, then for
// each of the 25 taps and 3 output channels one warp-uniform (broadcast) weight float4 feeds
// 4 x kOutRowsPerThread FMAs. Per four channels and thread: 1200 FFMA against 18 input and 75
// weight loads.
//
// A block is 128 threads = kOutRowsPerBlock input rows x 32 columns of one image. The input rows it
// needs (with one halo row each side, zero outside the map) stream through shared memory eight
// channels at a time, double buffered with cp.async; the weights (5, 5, 3, 64) stay in shared memory.
// Every output's sum runs over channel groups of 4 in order, taps in a fixed order within each,
// the same for any batch size and any image position.
constexpr int kOutCin = 64, kOutCout = 3, kOutHin = 32;
constexpr int kOutRowsPerThread = 4;
constexpr int kOutThreads = 128;
constexpr int kOutRowsPerBlock = kOutRowsPerThread * kOutThreads / 32;  // 16
constexpr int kOutTileRows = kOutRowsPerBlock + 2, kOutTileCols = kOutHin + 2;
constexpr int kOutTilePixels = kOutTileRows * kOutTileCols;
constexpr int kOutStageChannels = 8;  // 32 bytes of fp32 (one sector), 16 of bf16 per pixel per stage
constexpr int kOutStages = 2;
constexpr int kOutWeightFloats = 25 * kOutCout * kOutCin;
template <Math M> struct OutShape {
  using Act = typename MathTypes<M>::Act;
  static constexpr int kChunksPerPixel = kOutStageChannels * sizeof(Act) / 16;  // 16-byte chunks: 2 or 1
  static constexpr int kStageBytes = kOutTilePixels * kOutStageChannels * sizeof(Act);
  static constexpr int kSmemBytes = kOutWeightFloats * 4 + kOutStages * kStageBytes;
};

// Four channels (half h of a stage's eight) of tile pixel p as float32. fp32 stage layout: two planes
// [pixel] of float4 (channels 0-3, 4-7), so a warp's 32 consecutive pixels are 512 contiguous bytes;
// bf16: [pixel] of 8 bfloat16, read 8 bytes at a time.
template <Math M>
__device__ __forceinline__ float4 out_tile_load(const unsigned char* stage, int half, int p) {
  if constexpr (M == Math::Bf16) {
    uint2 u = reinterpret_cast<const uint2*>(stage)[2 * p + half];
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                       __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
  } else {
    return reinterpret_cast<const float4*>(stage)[half * kOutTilePixels + p];
  }
}

template <Math M>
__global__ void __launch_bounds__(kOutThreads, 3)
tconv_output_tanh(const typename MathTypes<M>::Act* __restrict__ in,  // (n, 32, 32, 64)
                  const float* __restrict__ weight,                   // (5, 5, 3, 64)
                  const float* __restrict__ bias,                     // (3)
                  float* __restrict__ out) {                          // (n, 64, 64, 3)
  using O = OutShape<M>;
  using Act = typename MathTypes<M>::Act;
  extern __shared__ __align__(16) unsigned char out_smem[];
  float* w_s = reinterpret_cast<float*>(out_smem);  // (25, 3, 64)
  unsigned char* tiles = out_smem + kOutWeightFloats * 4;
  const int tid = threadIdx.x;
  const int y0 = blockIdx.x * kOutRowsPerBlock, img = blockIdx.y;
  const Act* in_img = in + static_cast<int64_t>(img) * kOutHin * kOutHin * kOutCin;

  // Stage s: channels 8s..8s+7 of tile pixels (rows y0-1 .. y0+16, columns -1..32).
  auto load_stage = [&](int buf, int s) {
    unsigned char* t = tiles + buf * O::kStageBytes;
    for (int q = tid; q < kOutTilePixels * O::kChunksPerPixel; q += kOutThreads) {
      const int p = q / O::kChunksPerPixel, h = q % O::kChunksPerPixel;
      const int iy = y0 + p / kOutTileCols - 1, ix = p % kOutTileCols - 1;
      const bool valid = iy >= 0 && iy < kOutHin && ix >= 0 && ix < kOutHin;
      const Act* src = valid ? in_img + (iy * kOutHin + ix) * kOutCin + s * kOutStageChannels + h * 4 : in;
      unsigned char* dst = (M == Math::Bf16) ? t + p * 16 : t + (h * kOutTilePixels + p) * 16;
      cp_async16(dst, src, valid);
    }
  };
  for (int q = tid; q < kOutWeightFloats / 4; q += kOutThreads)
    cp_async16(w_s + 4 * q, weight + 4 * q, true);
  load_stage(0, 0);
  cp_async_commit();

  const int warp = tid / 32, ox = tid % 32;
  const int r0 = warp * kOutRowsPerThread;  // first tile row of this thread's window (input row y0 + r0 - 1)
  float acc[kOutRowsPerThread][2][2][kOutCout];
#pragma unroll
  for (int r = 0; r < kOutRowsPerThread; ++r)
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
      for (int b = 0; b < 2; ++b)
#pragma unroll
        for (int k = 0; k < kOutCout; ++k) acc[r][a][b][k] = 0.f;

  constexpr int kNumStages = kOutCin / kOutStageChannels;
#pragma unroll 1
  for (int s = 0; s < kNumStages; ++s) {
    if (s + 1 < kNumStages) load_stage((s + 1) % kOutStages, s + 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const unsigned char* t = tiles + (s % kOutStages) * O::kStageBytes;
#pragma unroll 1
    for (int half = 0; half < 2; ++half) {
      float4 v[kOutRowsPerThread + 2][3];
#pragma unroll
      for (int r = 0; r < kOutRowsPerThread + 2; ++r)
#pragma unroll
        for (int c = 0; c < 3; ++c) v[r][c] = out_tile_load<M>(t, half, (r0 + r) * kOutTileCols + ox + c);
      const float4* wq = reinterpret_cast<const float4*>(w_s) + s * 2 + half;  // channel group 2s + half
#pragma unroll
      for (int kh = 0; kh < 5; ++kh) {
        const int py = (kh & 1) ? 0 : 1, dy = (py + 1 - kh) / 2;
#pragma unroll
        for (int kw = 0; kw < 5; ++kw) {
          const int px = (kw & 1) ? 0 : 1, dx = (px + 1 - kw) / 2;
#pragma unroll
          for (int k = 0; k < kOutCout; ++k) {
            const float4 w = wq[((kh * 5 + kw) * kOutCout + k) * (kOutCin / 4)];
#pragma unroll
            for (int r = 0; r < kOutRowsPerThread; ++r) {
              const float4 x = v[r + 1 + dy][1 + dx];
              float a = acc[r][py][px][k];
              a = fmaf(x.x, w.x, a);
              a = fmaf(x.y, w.y, a);
              a = fmaf(x.z, w.z, a);
              a = fmaf(x.w, w.w, a);
              acc[r][py][px][k] = a;
            }
          }
        }
      }
    }
    __syncthreads();  // the buffer just read is the one the next iteration refills
  }

  const float b0 = bias[0], b1 = bias[1], b2 = bias[2];
#pragma unroll
  for (int r = 0; r < kOutRowsPerThread; ++r)
#pragma unroll
    for (int py = 0; py < 2; ++py) {
      const int y = 2 * (y0 + r0 + r) + py;
      float* o = out + ((static_cast<int64_t>(img) * 64 + y) * 64 + 2 * ox) * kOutCout;  // 6 floats, 8-byte aligned
      const float* a0 = acc[r][py][0];
      const float* a1 = acc[r][py][1];
      reinterpret_cast<float2*>(o)[0] = make_float2(tanhf(a0[0] + b0), tanhf(a0[1] + b1));
      reinterpret_cast<float2*>(o)[1] = make_float2(tanhf(a0[2] + b2), tanhf(a1[0] + b0));
      reinterpret_cast<float2*>(o)[2] = make_float2(tanhf(a1[1] + b1), tanhf(a1[2] + b2));
    }
}

}  // namespace gpu
}  // namespace facegen
