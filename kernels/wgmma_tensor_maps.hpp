// wgmma_tensor_maps.hpp: the tensor maps (CUtensorMap) the Hopper phase GEMMs' bulk copies read through,
// made on the host: the driver's encoder, found through the runtime, a 128-byte-swizzled tiled map, and
// the map over one tconv stage's input activations. For kernels/phase_gemm_wgmma.cu (tf32, bf16) and
// kernels/phase_gemm_wgmma_tf32x3.cu (float32 on tensor cores).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/cuda_check.cuh"
#include "kernels/cuda_helpers.cuh"

namespace facegen {
namespace gpu {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// cuTensorMapEncodeTiled from the driver, found through the runtime (no link against libcuda).
inline EncodeTiled encode_tiled() {
  static EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || p == nullptr)
      throw std::runtime_error("the CUDA driver has no cuTensorMapEncodeTiled (driver older than CUDA 12)");
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

// A 128-byte-swizzled tiled map of bfloat16 (Bf16) or float32 values (the others): dims and box
// innermost first, strides (bytes) of dims 1.. .
inline void encode(CUtensorMap* map, Math m, int rank, const void* base, const cuuint64_t* dims, const cuuint64_t* strides,
                   const cuuint32_t* box) {
  const cuuint32_t unit[5] = {1, 1, 1, 1, 1};
  const CUresult r = encode_tiled()(map, m == Math::Bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
                                    rank, const_cast<void*>(base), dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                    CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error("cuTensorMapEncodeTiled failed (CUresult " + std::to_string(static_cast<int>(r)) +
                             ") for a rank-" + std::to_string(rank) + " map");
}

// The map over a stage's input activations (n, H, H, C_IN) for the box of shape S: BK channels x H
// columns x kBoxRows rows x kBoxImages images (whole images or whole rows of one).
template <Math M, class C, class S>
void encode_activations(const void* in, int n, CUtensorMap* map) {
  using Act = typename MathTypes<M>::Act;
  const cuuint64_t dims[4] = {C::C_IN, C::H, C::H, static_cast<cuuint64_t>(n)};
  const cuuint64_t strides[3] = {C::C_IN * sizeof(Act), uint64_t{C::H} * C::C_IN * sizeof(Act),
                                 uint64_t{C::H} * C::H * C::C_IN * sizeof(Act)};
  const cuuint32_t box[4] = {S::BK, C::H, S::kBoxRows, S::kBoxImages};
  encode(map, M, 4, in, dims, strides, box);
}

}  // namespace gpu
}  // namespace facegen
