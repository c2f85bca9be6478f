// phase_gemm_wgmma.hpp: host side of the Hopper (sm_90a) phase GEMMs of kernels/phase_gemm_wgmma.cuh:
// whether the device and this binary can run them, the tensor maps over the weights, and the
// launch of one tconv stage (0..2) in tf32 or bf16, or in float32 on tensor cores (Tf32x3).
// Activations and weights are laid out exactly as for the mma.sync kernels (kernels/phase_gemm.cuh),
// so either path reads the other's inputs; Tf32x3's weights alone come split (below).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/phase_gemm.cuh"

namespace facegen {
namespace gpu {

// True when `device` has compute capability 9.0 and this binary carries the sm_90a kernels (built
// with 90a among CUDA_ARCH); asks the device once per call, so call it once.
bool wgmma_available(int device);

// The four phase B matrices of one stage's weights, (C_OUT, K) K fastest each, as tensor maps: b
// with the row tiles' box (BN rows), whole with all C_OUT rows (the image kernel's); ksize (4 or 5)
// decides each phase's taps, so the launches below take it from here.
struct PhaseWeightMaps {
  CUtensorMap b[4];
  CUtensorMap whole[4];
  int ksize = 5;
};
void make_phase_weight_maps(Math m, int stage, int ksize, const void* weight, PhaseWeightMaps* maps);

// Raises the kernels' shared-memory limits; once per process and precision before the first launch.
void configure_wgmma(Math m);

// Blocks of the stage's Large grid for n images (the caller picks Small below two per SM).
int64_t wgmma_large_blocks(int stage, int n);

// act_stage (n, H, H, C_IN) -> act_{stage+1} (n, 2H, 2H, C_OUT): relu(scale * tconv + shift).
// small: one consumer warpgroup per block (64 rows) instead of two; the same bits either way.
void launch_tconv_wgmma(Math m, int stage, bool small, const void* in, int n, const PhaseWeightMaps& weights,
                        const float* scale, const float* shift, void* out, cudaStream_t stream);

// tconv1-3 with the channels as wgmma's M and the positions of whole images as N
// (kernels/phase_gemm_wgmma_image.cuh); the same inputs and maps as launch_tconv_wgmma. ring 0
// is the shipped pipeline depth, 1 another one for the benchmark (phase_gemm_wgmma.cu,
// ImageRingSize); the bits are the same either way.
// Blocks of the image kernel's grid for stage 0, 1 or 2 and n images.
int64_t wgmma_image_blocks(int stage, int n);
void launch_tconv_wgmma_image(Math m, int stage, int ring, const void* in, int n, const PhaseWeightMaps& weights,
                              const float* scale, const float* shift, void* out, cudaStream_t stream);

// Float32 on tensor cores (Math::Tf32x3, kernels/phase_gemm_wgmma_tf32x3.cuh; launches in
// kernels/phase_gemm_wgmma_tf32x3.cu): row tiles, plain float32 activations in and out.
// The maps over one stage's split weights (kernels/phase_weights.hpp, phase_b_split_matrices: per
// phase (2 C_OUT, K), the tf32 parts hi then lo), into maps->b; maps->whole is not used.
void make_tf32x3_weight_maps(int stage, int ksize, const float* split_weight, PhaseWeightMaps* maps);
// Raises the kernels' shared-memory limits; once per process before the first launch.
void configure_wgmma_tf32x3();
// Blocks of the stage's Large grid for n images (the caller picks Small below two per SM).
int64_t wgmma_tf32x3_large_blocks(int stage, int n);
// act_stage (n, H, H, C_IN) -> act_{stage+1} (n, 2H, 2H, C_OUT), float32. small: half the rows per block;
// schedule 0 (the default): two column slices a warpgroup, each slice's FADDs beside the other's wgmmas;
// 1: one slice, the same bits; 2 (for the benchmark): schedule 0 with an FADD every two k steps, other
// bits. Small and Large give the same bits.
void launch_tconv_wgmma_tf32x3(int stage, bool small, int schedule, const float* in, int n,
                               const PhaseWeightMaps& weights, const float* scale, const float* shift, float* out,
                               cudaStream_t stream);

}  // namespace gpu
}  // namespace facegen
