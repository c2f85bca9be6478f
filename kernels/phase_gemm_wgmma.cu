// phase_gemm_wgmma.cu: tensor maps and launches of the Hopper phase GEMMs (kernels/phase_gemm_wgmma.cuh).
//
// Tile shapes per stage (BM = 64 x consumer warpgroups, BN, stages of the ring):
//   tconv1 (512 -> 256, 4x4):   Large 128 x 128, 6 stages (192 KB, one block per SM); Small 64 x 128, 8
//   tconv2 (256 -> 128, 8x8):   the same
//   tconv3 (128 -> 64, 16x16):  Large 128 x 64, 4 stages (96 KB, two blocks per SM); Small 64 x 64, 4
// Small has one consumer warpgroup, Large two, issuing the same m64 x BN wgmma steps: same bits.
// The image kernel (kernels/phase_gemm_wgmma_image.cuh) runs every stage over whole images with the
// channels as M; its rings are listed at ImageRingSize.
#include "kernels/phase_gemm_wgmma.hpp"

#include <mutex>
#include <stdexcept>
#include <string>

#include "common/cuda_check.cuh"
#include "kernels/phase_gemm_wgmma.cuh"
#include "kernels/wgmma_tensor_maps.hpp"
#include "kernels/phase_gemm_wgmma_image.cuh"

namespace facegen {
namespace gpu {
namespace {

__global__ void wgmma_probe(int* compiled_in) { *compiled_in = FACEGEN_WGMMA_ENABLED; }

template <Math M, int S, bool Small> struct WgmmaStage;
template <Math M, bool Small> struct WgmmaStage<M, 0, Small> {
  static constexpr int C_IN = 512, C_OUT = 256, H = 4, BN = 128, CONSUMERS = Small ? 1 : 2, STAGES = Small ? 8 : 6;
};
template <Math M, bool Small> struct WgmmaStage<M, 1, Small> {
  static constexpr int C_IN = 256, C_OUT = 128, H = 8, BN = 128, CONSUMERS = Small ? 1 : 2, STAGES = Small ? 8 : 6;
};
template <Math M, bool Small> struct WgmmaStage<M, 2, Small> {
  static constexpr int C_IN = 128, C_OUT = 64, H = 16, BN = 64, CONSUMERS = Small ? 1 : 2, STAGES = 4;
};
template <Math M, int S, bool Small>
using WgmmaStageShape = WgmmaShape<M, WgmmaStage<M, S, Small>::C_IN, WgmmaStage<M, S, Small>::C_OUT,
                                   WgmmaStage<M, S, Small>::H, WgmmaStage<M, S, Small>::BN,
                                   WgmmaStage<M, S, Small>::CONSUMERS, WgmmaStage<M, S, Small>::STAGES>;

template <Math M, int S>
void make_weight_maps(int ksize, const void* weight, PhaseWeightMaps* maps) {
  using C = WgmmaStage<M, S, false>;
  using Shape = WgmmaStageShape<M, S, false>;
  using Act = typename MathTypes<M>::Act;
  maps->ksize = ksize;
  for (int z = 0; z < 4; ++z) {
    const int k_total = phase_k_total(z, C::C_IN, ksize);
    const Act* b = static_cast<const Act*>(weight) + static_cast<int64_t>(phase_k_offset(z, C::C_IN, ksize)) * C::C_OUT;
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k_total), C::C_OUT};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k_total) * sizeof(Act)};
    const cuuint32_t box[2] = {Shape::BK, Shape::BN};
    encode(&maps->b[z], M, 2, b, dims, strides, box);
    const cuuint32_t whole_box[2] = {Shape::BK, C::C_OUT};
    encode(&maps->whole[z], M, 2, b, dims, strides, whole_box);
  }
}

template <Math M, int S, bool Small>
auto kernel_of() {
  using C = WgmmaStage<M, S, Small>;
  return tconv_phase_wgmma<M, C::C_IN, C::C_OUT, C::H, C::BN, C::CONSUMERS, C::STAGES>;
}

template <Math M, int S, bool Small>
void configure_one() {
  CUDA_CHECK(cudaFuncSetAttribute(kernel_of<M, S, Small>(), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  WgmmaStageShape<M, S, Small>::kSmemBytes));
}

template <Math M, int S, bool Small>
void launch(const void* in, int n, const PhaseWeightMaps& weights, const float* scale, const float* shift, void* out,
            cudaStream_t stream) {
  using C = WgmmaStage<M, S, Small>;
  using Shape = WgmmaStageShape<M, S, Small>;
  using Act = typename MathTypes<M>::Act;
  WgmmaMaps maps;
  encode_activations<M, C, Shape>(in, n, &maps.a);
  for (int z = 0; z < 4; ++z) maps.b[z] = weights.b[z];
  const int m_total = n * C::H * C::H;
  const dim3 grid((m_total + Shape::BM - 1) / Shape::BM, C::C_OUT / C::BN, 4);
  const auto kernel = kernel_of<M, S, Small>();
  kernel<<<grid, Shape::kThreads, Shape::kSmemBytes, stream>>>(maps, scale, shift, static_cast<Act*>(out), m_total,
                                                                 weights.ksize);
  CUDA_CHECK_LAUNCH();
}

// The image kernel's rings per stage: RING 0 shipped, 1 for the benchmark.
//   tconv1: 8 images x 256 channels, four consumers: 0 four stages of 48 KB; 1 three stages
//   tconv2: 4 images x 128 channels, two consumers: 0 four stages of 48 KB; 1 three stages
//   tconv3: 1 image x 64 channels, one consumer: 0 two stages of 40 KB, two blocks per SM; 1 four
//           stages, one block per SM
template <int S, int RING> struct ImageRingSize;
template <> struct ImageRingSize<0, 0> { static constexpr int kStages = 4, kMinBlocks = 1; };
template <> struct ImageRingSize<0, 1> { static constexpr int kStages = 3, kMinBlocks = 1; };
template <> struct ImageRingSize<1, 0> { static constexpr int kStages = 4, kMinBlocks = 1; };
template <> struct ImageRingSize<1, 1> { static constexpr int kStages = 3, kMinBlocks = 1; };
template <> struct ImageRingSize<2, 0> { static constexpr int kStages = 2, kMinBlocks = 2; };
template <> struct ImageRingSize<2, 1> { static constexpr int kStages = 4, kMinBlocks = 1; };
template <Math M, int S, int RING> struct ImageRing {
  using C = WgmmaStage<M, S, false>;
  using Shape = WgmmaImageShape<M, C::C_IN, C::C_OUT, C::H, ImageRingSize<S, RING>::kStages,
                                ImageRingSize<S, RING>::kMinBlocks>;
};
template <Math M, int S, int RING>
auto image_kernel_of() {
  using C = typename ImageRing<M, S, RING>::C;
  using Shape = typename ImageRing<M, S, RING>::Shape;
  return tconv_phase_wgmma_image<M, C::C_IN, C::C_OUT, C::H, Shape::kStages, Shape::kMinBlocks>;
}

template <Math M, int S, int RING>
void configure_image() {
  CUDA_CHECK(cudaFuncSetAttribute(image_kernel_of<M, S, RING>(), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  ImageRing<M, S, RING>::Shape::kSmemBytes));
}

template <Math M, int S, int RING>
void launch_image(const void* in, int n, const PhaseWeightMaps& weights, const float* scale, const float* shift,
                  void* out, cudaStream_t stream) {
  using C = typename ImageRing<M, S, RING>::C;
  using Shape = typename ImageRing<M, S, RING>::Shape;
  using Act = typename MathTypes<M>::Act;
  WgmmaMaps maps;
  encode_activations<M, C, Shape>(in, n, &maps.a);
  for (int z = 0; z < 4; ++z) maps.b[z] = weights.whole[z];
  // x = 4 * image group + phase: the four phases of a group run side by side.
  const int64_t blocks = 4 * ((int64_t{n} + Shape::kImages - 1) / Shape::kImages);
  if (blocks > 0x7fffffff) throw std::logic_error("too many images for one launch of the image kernel");
  const auto kernel = image_kernel_of<M, S, RING>();
  kernel<<<dim3(static_cast<unsigned>(blocks)), Shape::kThreads, Shape::kSmemBytes, stream>>>(maps, scale, shift,
                                                                                             static_cast<Act*>(out), n,
                                                                                             weights.ksize);
  CUDA_CHECK_LAUNCH();
}

template <Math M, int S>
void launch_image_ring(int ring, const void* in, int n, const PhaseWeightMaps& w, const float* scale,
                       const float* shift, void* out, cudaStream_t stream) {
  if (ring == 0) launch_image<M, S, 0>(in, n, w, scale, shift, out, stream);
  else if (ring == 1) launch_image<M, S, 1>(in, n, w, scale, shift, out, stream);
  else throw std::logic_error("the image kernel has rings 0 and 1");
}

template <Math M, int S>
void launch_stage(bool small, const void* in, int n, const PhaseWeightMaps& w, const float* scale, const float* shift,
                  void* out, cudaStream_t stream) {
  if (small) launch<M, S, true>(in, n, w, scale, shift, out, stream);
  else launch<M, S, false>(in, n, w, scale, shift, out, stream);
}

template <Math M>
void launch_math(int stage, bool small, const void* in, int n, const PhaseWeightMaps& w, const float* scale,
                 const float* shift, void* out, cudaStream_t stream) {
  switch (stage) {
    case 0: launch_stage<M, 0>(small, in, n, w, scale, shift, out, stream); break;
    case 1: launch_stage<M, 1>(small, in, n, w, scale, shift, out, stream); break;
    case 2: launch_stage<M, 2>(small, in, n, w, scale, shift, out, stream); break;
    default: throw std::logic_error("tconv stage must be 0, 1 or 2");
  }
}

template <Math M>
void configure_math() {
  configure_one<M, 0, false>();
  configure_one<M, 1, false>();
  configure_one<M, 2, false>();
  configure_one<M, 0, true>();
  configure_one<M, 1, true>();
  configure_one<M, 2, true>();
  configure_image<M, 0, 0>();
  configure_image<M, 0, 1>();
  configure_image<M, 1, 0>();
  configure_image<M, 1, 1>();
  configure_image<M, 2, 0>();
  configure_image<M, 2, 1>();
}

void require_tensor_math(Math m) {
  if (m != Math::Tf32 && m != Math::Bf16)
    throw std::logic_error("these wgmma phase GEMMs run tf32 and bf16 only (float32: launch_tconv_wgmma_tf32x3)");
}

}  // namespace

bool wgmma_available(int device) {
  int major = 0, minor = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major != 9 || minor != 0) return false;
  int* flag = nullptr;
  int compiled_in = 0;
  CUDA_CHECK(cudaMalloc(&flag, sizeof(int)));
  wgmma_probe<<<1, 1>>>(flag);
  cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess) status = cudaMemcpy(&compiled_in, flag, sizeof(int), cudaMemcpyDeviceToHost);
  cudaFree(flag);
  CUDA_CHECK(status);
  return compiled_in == 1;
}

void make_phase_weight_maps(Math m, int stage, int ksize, const void* weight, PhaseWeightMaps* maps) {
  require_tensor_math(m);
  if (ksize != 4 && ksize != 5) throw std::logic_error("the wgmma phase GEMMs take kernel size 4 or 5");
  const bool bf16 = m == Math::Bf16;
  switch (stage) {
    case 0: bf16 ? make_weight_maps<Math::Bf16, 0>(ksize, weight, maps) : make_weight_maps<Math::Tf32, 0>(ksize, weight, maps); break;
    case 1: bf16 ? make_weight_maps<Math::Bf16, 1>(ksize, weight, maps) : make_weight_maps<Math::Tf32, 1>(ksize, weight, maps); break;
    case 2: bf16 ? make_weight_maps<Math::Bf16, 2>(ksize, weight, maps) : make_weight_maps<Math::Tf32, 2>(ksize, weight, maps); break;
    default: throw std::logic_error("tconv stage must be 0, 1 or 2");
  }
}

void configure_wgmma(Math m) {
  require_tensor_math(m);
  if (m == Math::Bf16) configure_math<Math::Bf16>();
  else configure_math<Math::Tf32>();
}

int64_t wgmma_large_blocks(int stage, int n) {
  static constexpr int kH[3] = {4, 8, 16}, kNTiles[3] = {2, 1, 1};
  if (stage < 0 || stage > 2) throw std::logic_error("tconv stage must be 0, 1 or 2");
  return (int64_t{n} * kH[stage] * kH[stage] + 127) / 128 * kNTiles[stage] * 4;
}

void launch_tconv_wgmma(Math m, int stage, bool small, const void* in, int n, const PhaseWeightMaps& weights,
                        const float* scale, const float* shift, void* out, cudaStream_t stream) {
  require_tensor_math(m);
  if (n <= 0) return;
  if (m == Math::Bf16) launch_math<Math::Bf16>(stage, small, in, n, weights, scale, shift, out, stream);
  else launch_math<Math::Tf32>(stage, small, in, n, weights, scale, shift, out, stream);
}

int64_t wgmma_image_blocks(int stage, int n) {
  if (stage < 0 || stage > 2) throw std::logic_error("tconv stage must be 0, 1 or 2");
  const int images = stage == 0   ? ImageRing<Math::Bf16, 0, 0>::Shape::kImages
                     : stage == 1 ? ImageRing<Math::Bf16, 1, 0>::Shape::kImages
                                  : ImageRing<Math::Bf16, 2, 0>::Shape::kImages;
  return 4 * ((int64_t{n} + images - 1) / images);
}

void launch_tconv_wgmma_image(Math m, int stage, int ring, const void* in, int n, const PhaseWeightMaps& weights,
                              const float* scale, const float* shift, void* out, cudaStream_t stream) {
  require_tensor_math(m);
  if (n <= 0) return;
  const bool bf16 = m == Math::Bf16;
  switch (stage) {
    case 0:
      if (bf16) launch_image_ring<Math::Bf16, 0>(ring, in, n, weights, scale, shift, out, stream);
      else launch_image_ring<Math::Tf32, 0>(ring, in, n, weights, scale, shift, out, stream);
      break;
    case 1:
      if (bf16) launch_image_ring<Math::Bf16, 1>(ring, in, n, weights, scale, shift, out, stream);
      else launch_image_ring<Math::Tf32, 1>(ring, in, n, weights, scale, shift, out, stream);
      break;
    case 2:
      if (bf16) launch_image_ring<Math::Bf16, 2>(ring, in, n, weights, scale, shift, out, stream);
      else launch_image_ring<Math::Tf32, 2>(ring, in, n, weights, scale, shift, out, stream);
      break;
    default: throw std::logic_error("tconv stage must be 0, 1 or 2");
  }
}

}  // namespace gpu
}  // namespace facegen
