// tconv_output_mma.cuh: the last transposed convolution (64 -> 3 channels, 32x32 -> 64x64) with bias
// and tanh, for bf16 activations, on tensor cores (mma.sync, sm_80 and later), as a GEMM and a
// col2im inside one block.
//
// With 3 output channels the direct form (kernels/phase_gemm.cuh, tconv_output_tanh) is bound by
// FFMA issue. Here every input pixel q first gets all its products at once:
//   Y (P, 80) = A (P, 64) · W' (64, 80),  W'(c, 3 * tap + k) = weight[kh][kw][k][c], tap = 5 kh + kw
// (75 columns used, padded to 10 n-tiles of 8), then each output pixel sums the Y entries of its
// phase's taps (4, 6, 6 or 9), adds the bias and takes tanh:
//   out(2 oy + py, 2 ox + px, k) = tanh(bias[k] + sum over taps (ty, tx) of Y(q(oy + dy, ox + dx), 3 tap + k)).
// The GEMM is 4800 multiply-adds per input pixel, as in the direct form, but on tensor cores it is
// far below the time it takes to read the activations, so the kernel is bound by memory.
//
// Accuracy: the activations are bf16 already (exact); each weight is split into three bf16 terms
// (hi = bf16(w), mid = bf16(w - hi), lo = bf16(w - hi - mid)), three mma steps, so W' keeps float32's
// 24 significant bits and products accumulate in float32. (Two terms, 16 bits, ran 1.20 ms at batch
// 8192 on an H200 against the direct kernel's 2.11, but their error against float64 reached about
// 1e-5, the GPU tests' bound for this layer, on some random draws.)
//
// A tile is 16 output rows (8 input rows) of one image: its A tile is the 8 rows with one halo row
// each side (zeros outside the map, which makes their Y zero), 320 positions; 8 warps compute Y
// (320 x 80 float32) into shared memory; then 256 threads make 4 output pixels each. The grid is
// persistent (one block per SM, tiles t, t + grid, ...): the next tile's rows load with cp.async into
// the other of two A buffers while this tile is computed. Every output is the same sequence of operations whatever the batch size and the
// image's position: fixed K order inside the GEMM, taps in a fixed order in the sum.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/phase_gemm.cuh"

namespace facegen {
namespace gpu {

constexpr int kOmInRows = 8;                          // input rows per block
constexpr int kOmPositions = (kOmInRows + 2) * 32;    // with a halo row each side: 320 (20 m-tiles)
constexpr int kOmNTiles = 10;                         // 80 columns: 25 taps x 3 channels, padded
constexpr int kOmKSteps = 64 / 16;                    // input channels in mma k steps of 16
constexpr int kOmThreads = 256;
constexpr int kOmApitch = 64 + 8;                     // bf16 per position: 144 bytes, ldmatrix conflict-free
constexpr int kOmYpitch = 76;                         // float32 per position of Y (75 used)
constexpr int kOmTerms = 3;                           // bf16 terms per weight: hi, mid, lo
// Weight fragments: (n-tile, k step, term, lane) -> two 32-bit registers, in the order lanes read them.
constexpr int kOmWeightWords = kOmNTiles * kOmKSteps * kOmTerms * 32 * 2;
constexpr int kOmABytes = kOmPositions * kOmApitch * 2;
// 220 KB: fits the 227 KB a block may have on sm_90; devices with less run the direct kernel.
constexpr int kOmSmemBytes = 2 * kOmABytes + kOmWeightWords * 4 + kOmPositions * kOmYpitch * 4;
constexpr int kOmTilesPerImage = 32 / kOmInRows;

// Stage 1 (issued, not awaited): the activation rows of tile t (with halo) into As.
__device__ __forceinline__ void output_mma_load_rows(const __nv_bfloat16* __restrict__ in, int t, __nv_bfloat16* As) {
  const __nv_bfloat16* in_img = in + static_cast<int64_t>(t / kOmTilesPerImage) * 32 * 32 * 64;
  const int y0 = (t % kOmTilesPerImage) * kOmInRows;
  for (int q = threadIdx.x; q < kOmPositions * 8; q += kOmThreads) {
    const int p = q / 8, chunk = q % 8;
    const int iy = y0 - 1 + p / 32, ix = p % 32;
    const bool valid = iy >= 0 && iy < 32;
    const __nv_bfloat16* src = valid ? in_img + (iy * 32 + ix) * 64 + chunk * 8 : in_img;
    cp_async16(As + p * kOmApitch + chunk * 8, src, valid);
  }
}

// Stage 2: Y for m-tiles warp, warp + 8, ... (16 positions x 80 columns each) into shared memory.
__device__ __forceinline__ void output_mma_products(const __nv_bfloat16* As, const uint32_t* Ws, float* Ys) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t4 = lane % 4;
  for (int mt = warp; mt < kOmPositions / 16; mt += kOmThreads / 32) {
    float acc[kOmNTiles][4];
#pragma unroll
    for (int n = 0; n < kOmNTiles; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[n][i] = 0.f;
#pragma unroll
    for (int ks = 0; ks < kOmKSteps; ++ks) {
      uint32_t a[4];
      ldmatrix_x4(a, As + (mt * 16 + lane % 16) * kOmApitch + ks * 16 + (lane / 16) * 8);
#pragma unroll
      for (int n = 0; n < kOmNTiles; ++n) {
#pragma unroll
        for (int term = 0; term < kOmTerms; ++term) {
          const uint2 b = reinterpret_cast<const uint2*>(Ws)[((n * kOmKSteps + ks) * kOmTerms + term) * 32 + lane];
          asm volatile(
              "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
              "{%0,%1,%2,%3};\n"
              : "+f"(acc[n][0]), "+f"(acc[n][1]), "+f"(acc[n][2]), "+f"(acc[n][3])
              : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y));
        }
      }
    }
#pragma unroll
    for (int n = 0; n < kOmNTiles; ++n) {
      const int col = n * 8 + 2 * t4;
      if (col >= kOmYpitch) continue;  // padding columns 76..79
#pragma unroll
      for (int half = 0; half < 2; ++half)
        *reinterpret_cast<float2*>(Ys + (mt * 16 + g + 8 * half) * kOmYpitch + col) =
            make_float2(acc[n][2 * half], acc[n][2 * half + 1]);
    }
  }
  __syncthreads();
}

// Stage 3: the output pixels of local output row oyl (0..15), column x: tanh(bias + sum of taps).
__device__ __forceinline__ void output_mma_col2im(const float* Ys, const float* __restrict__ bias, float* __restrict__ out_img,
                                                  int y0) {
  const int x = threadIdx.x % 64, px = x & 1, ox = x >> 1;
  const float b0 = bias[0], b1 = bias[1], b2 = bias[2];
#pragma unroll
  for (int i = 0; i < 2 * kOmInRows * 64 / kOmThreads; ++i) {
    const int oyl = threadIdx.x / 64 + (kOmThreads / 64) * i, py = oyl & 1, r = (oyl >> 1) + 1;
    float s0 = 0.f, s1 = 0.f, s2 = 0.f;
#pragma unroll
    for (int ty = 0; ty < 3; ++ty) {
      if (ty >= phase_taps(py)) break;
      const int kh = phase_kernel_index(py, ty), dy = phase_offset(py, ty);
#pragma unroll
      for (int tx = 0; tx < 3; ++tx) {
        if (tx >= phase_taps(px)) break;
        const int kw = phase_kernel_index(px, tx), ix = ox + phase_offset(px, tx);
        if (ix < 0 || ix >= 32) continue;
        const float* y = Ys + ((r + dy) * 32 + ix) * kOmYpitch + (kh * 5 + kw) * 3;
        s0 += y[0];
        s1 += y[1];
        s2 += y[2];
      }
    }
    float* o = out_img + ((2 * y0 + oyl) * 64 + x) * 3;
    o[0] = tanhf(s0 + b0);
    o[1] = tanhf(s1 + b1);
    o[2] = tanhf(s2 + b2);
  }
}

__global__ void __launch_bounds__(kOmThreads, 1)
tconv_output_tanh_mma(const __nv_bfloat16* __restrict__ in,  // (n, 32, 32, 64)
                      const uint32_t* __restrict__ wfrag,    // kOmWeightWords, see output_weight_fragments
                      const float* __restrict__ bias,        // (3)
                      float* __restrict__ out,               // (n, 64, 64, 3)
                      int tiles) {                           // n * kOmTilesPerImage
  extern __shared__ __align__(16) unsigned char om_smem[];
  __nv_bfloat16* const a_buffers = reinterpret_cast<__nv_bfloat16*>(om_smem);  // two of kOmABytes
  auto As = [&](int i) { return a_buffers + (i % 2) * (kOmABytes / 2); };
  uint32_t* Ws = reinterpret_cast<uint32_t*>(om_smem + 2 * kOmABytes);
  float* Ys = reinterpret_cast<float*>(om_smem + 2 * kOmABytes + kOmWeightWords * 4);
  for (int q = threadIdx.x; q < kOmWeightWords / 4; q += kOmThreads) cp_async16(Ws + 4 * q, wfrag + 4 * q, true);
  if (blockIdx.x < tiles) output_mma_load_rows(in, blockIdx.x, As(0));
  cp_async_commit();
  for (int t = blockIdx.x, i = 0; t < tiles; t += gridDim.x, ++i) {
    // The other buffer was last read by the previous tile's products, which ended with a barrier.
    if (t + static_cast<int>(gridDim.x) < tiles) output_mma_load_rows(in, t + gridDim.x, As(i + 1));
    cp_async_commit();
    cp_async_wait<1>();  // this tile's rows (and, the first time, the weights) have landed
    __syncthreads();
    output_mma_products(As(i), Ws, Ys);
    const int img = t / kOmTilesPerImage, y0 = (t % kOmTilesPerImage) * kOmInRows;
    output_mma_col2im(Ys, bias, out + static_cast<int64_t>(img) * 64 * 64 * 3, y0);
    __syncthreads();  // Ys is rewritten by the next tile's products
  }
  cp_async_wait<0>();
}

}  // namespace gpu
}  // namespace facegen
