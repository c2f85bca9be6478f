// generator_gpu.cu: weights rearranged for the phase GEMMs, and the launches of each layer. Each
// layer has a Large and a Small tile shape (StageConfig); fp32 Small runs 4 x 8 outputs per thread
// (TM = 4) so that small batches get twice the threads and half-length FFMA chains per thread.
#include "kernels/generator_gpu.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/model_shape.hpp"
#include "common/cuda_check.cuh"
#include "kernels/phase_gemm.cuh"
#include "kernels/phase_gemm_wgmma.hpp"
#include "kernels/tconv_output_mma.cuh"
#include "kernels/weight_folding.hpp"

namespace facegen {
namespace {

using gpu::Math;

// Offsets of the network.bin blocks (generator/network.hpp), computed here from the shapes so this
// file needs nothing but the flat float array.
struct Layout {
  int64_t proj_weight, proj_bias, bn[4], tconv_weight[4], tconv_bias[4];
  Layout() {
    int64_t o = 0;
    proj_weight = o; o += int64_t{kLatentDim} * kProjOutputs;
    proj_bias = o;   o += kProjOutputs;
    for (int s = 0; s < kNumStages; ++s) {
      bn[s] = o;           o += 4 * kStageChannels[s];
      tconv_weight[s] = o; o += int64_t{kTaps} * kTaps * kStageChannels[s + 1] * kStageChannels[s];
      tconv_bias[s] = o;   o += kStageChannels[s + 1];
    }
    if (o != kNetworkFloats) throw std::logic_error("network layout does not add up to kNetworkFloats");
  }
};

// The four phase B matrices of one tconv, weight (5, 5, c_out, c_in) -> per phase z, K = taps * c_in:
// fp32 (K, c_out) c_out fastest; tf32 and bf16 (c_out, K) K fastest, the layout their ldmatrix reads.
template <typename T>
std::vector<T> phase_matrices(const float* w, int c_in, int c_out, Precision p) {
  std::vector<T> b(static_cast<size_t>(kTaps) * kTaps * c_out * c_in);
  for (int z = 0; z < 4; ++z) {
    const int py = gpu::phase_py(z), px = gpu::phase_px(z);
    const int nty = gpu::phase_taps(py), ntx = gpu::phase_taps(px), k_total = nty * ntx * c_in;
    T* bz = b.data() + static_cast<size_t>(gpu::phase_k_offset(z, c_in)) * c_out;
    for (int ty = 0; ty < nty; ++ty)
      for (int tx = 0; tx < ntx; ++tx) {
        const int kh = gpu::phase_kernel_index(py, ty), kw = gpu::phase_kernel_index(px, tx);
        const int t = ty * ntx + tx;
        for (int k = 0; k < c_out; ++k)
          for (int c = 0; c < c_in; ++c) {
            float v = w[((static_cast<size_t>(kh) * kTaps + kw) * c_out + k) * c_in + c];
            size_t kk = static_cast<size_t>(t) * c_in + c;
            if constexpr (sizeof(T) == 2) {
              bz[static_cast<size_t>(k) * k_total + kk] = __float2bfloat16_rn(v);
            } else if (p == Precision::Tf32) {
              bz[static_cast<size_t>(k) * k_total + kk] = round_to_tf32(v);
            } else {
              bz[kk * c_out + k] = v;
            }
          }
      }
  }
  return b;
}

template <typename T>
T* upload(const std::vector<T>& v) {
  T* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, v.size() * sizeof(T)));
  CUDA_CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

// tconv4 on tensor cores (kernels/tconv_output_mma.cuh): its weight fragments on the device, or null
// where the device cannot give a block the kernel's shared memory (then the direct kernel runs).
template <Math M>
uint32_t* setup_output_mma(const float* weight) {
  static_assert(kStageChannels[3] == 64 && kStageChannels[4] == 3 && kStageSize[3] == 32,
                "tconv_output_tanh_mma is written for 64 -> 3 channels at 32 x 32");
  constexpr int kSmem = gpu::OutputMmaShape<M>::kSmemBytes;
  int device = 0, smem_optin = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (smem_optin < kSmem) return nullptr;  // sm_90: 227 KB; sm_80: 163 KB, sm_86/89: 99 KB
  CUDA_CHECK(cudaFuncSetAttribute(gpu::tconv_output_tanh_mma<M>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  return upload(gpu::output_mma_weight_fragments<M>(weight));
}

// Tile shapes per stage. Two per stage: Large for batches that fill the GPU, Small (half the
// columns per block, so twice the blocks) for batches whose Large grid would leave SMs idle
// (DeviceNetwork::tconv picks). The tile shape only decides which threads compute which outputs:
// every output is the same sequence of multiply-adds over K in the same order (one FFMA chain in
// fp32, the same mma.sync steps in tf32/bf16), so both give the same bits and an image never
// depends on the batch size (the GPU tests compare batches 1, 3, 127, 1000 and 8192 byte for byte).
// fp32 Small: TM = 4 rows per thread, 4 x 8 outputs (TM = 8 everywhere else), in blocks of 128 x 64
// (256 threads), and 64 x 64 (128 threads) for tconv1. At 64 images tconv1's K is up to 4608 and its
// 8 x 8 threads' FFMA chains were the critical path (128 x 64 x TM 8: 0.458 ms; x TM 4: 0.292 ms);
// 64 x 64 blocks spread the 9-tap phase's rows over twice the SMs. Each output keeps the same FFMA
// sequence over K, so the bits do not change.
// tconv3 (stage 2, C_OUT = 64) Large in the tensor-core flavours: blocks of 256 x 64 as 4 warps of
// 64 x 64 (the 128 x 64 blocks' 64 x 32 warp tiles read a third more shared memory per multiply), two
// stages so that two blocks (8 warps) still fit in an SM's shared memory (2 x 92 KB).
template <Math M, int S, bool Small> struct StageConfig;
template <Math M, bool Small> struct StageConfig<M, 0, Small> {
  static constexpr bool kFp32Small = M == Math::Fp32 && Small;
  static constexpr int C_IN = 512, C_OUT = 256, H = 4, BM = kFp32Small ? 64 : 128, BN = Small ? 64 : 128, STAGES = 3;
  static constexpr int TM = kFp32Small ? 4 : 8;
};
template <Math M, bool Small> struct StageConfig<M, 1, Small> {
  static constexpr int C_IN = 256, C_OUT = 128, H = 8, BM = 128, BN = Small ? 64 : 128, STAGES = 3;
  static constexpr int TM = M == Math::Fp32 && Small ? 4 : 8;
};
template <Math M, bool Small> struct StageConfig<M, 2, Small> {
  static constexpr bool kWide = M != Math::Fp32 && !Small;
  static constexpr int C_IN = 128, C_OUT = 64, H = 16, BM = kWide ? 256 : 128, BN = 64, STAGES = kWide ? 2 : 3;
  static constexpr int TM = M == Math::Fp32 && Small ? 4 : 8;
};

template <Math M, int S, bool Small>
void configure_stage() {
  using C = StageConfig<M, S, Small>;
  using Shape = gpu::TileShape<M, C::BM, C::BN, C::STAGES, C::TM>;
  CUDA_CHECK(cudaFuncSetAttribute(gpu::tconv_phase_gemm<M, C::C_IN, C::C_OUT, C::H, C::BM, C::BN, C::STAGES, C::TM>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, Shape::kSmemBytes));
}

// Blocks of the stage's grid for n images.
template <Math M, int S, bool Small>
int64_t stage_blocks(int n) {
  using C = StageConfig<M, S, Small>;
  return (int64_t{n} * C::H * C::H + C::BM - 1) / C::BM * (C::C_OUT / C::BN) * 4;
}

template <Math M, int S, bool Small>
void launch_stage(const void* in, int n, const void* weight, const float* scale, const float* shift,
                  void* out, cudaStream_t stream) {
  using C = StageConfig<M, S, Small>;
  using Shape = gpu::TileShape<M, C::BM, C::BN, C::STAGES, C::TM>;
  using Act = typename gpu::MathTypes<M>::Act;
  const int m_total = n * C::H * C::H;
  dim3 grid((m_total + C::BM - 1) / C::BM, C::C_OUT / C::BN, 4);
  gpu::tconv_phase_gemm<M, C::C_IN, C::C_OUT, C::H, C::BM, C::BN, C::STAGES, C::TM>
      <<<grid, Shape::kThreads, Shape::kSmemBytes, stream>>>(
          static_cast<const Act*>(in), static_cast<const Act*>(weight), scale, shift,
          static_cast<Act*>(out), m_total);
  CUDA_CHECK_LAUNCH();
}

// Small tiles when the Large grid would not give every SM two blocks (the Large tensor-core tiles
// fit two per SM): at 64 images, tconv1's Large grid is 64 blocks for 132 SMs.
// tiles: 0 picks by the grid as above; 1 forces Small, 2 Large (FACEGEN_GPU_TILES, for the
// sanitizer runs that must see both shapes at a few images).
template <Math M, int S>
void launch_stage_for(int n, int sm_count, int tiles, const void* in, const void* weight, const float* scale,
                      const float* shift, void* out, cudaStream_t stream) {
  const bool small = tiles == 0 ? stage_blocks<M, S, false>(n) < 2 * int64_t{sm_count} : tiles == 1;
  if (small)
    launch_stage<M, S, true>(in, n, weight, scale, shift, out, stream);
  else
    launch_stage<M, S, false>(in, n, weight, scale, shift, out, stream);
}

template <Math M>
void launch_tconv(int stage, int sm_count, int tiles, const void* in, int n, const void* weight, const float* scale,
                  const float* shift, void* out, cudaStream_t stream) {
  switch (stage) {
    case 0: launch_stage_for<M, 0>(n, sm_count, tiles, in, weight, scale, shift, out, stream); break;
    case 1: launch_stage_for<M, 1>(n, sm_count, tiles, in, weight, scale, shift, out, stream); break;
    case 2: launch_stage_for<M, 2>(n, sm_count, tiles, in, weight, scale, shift, out, stream); break;
    default: throw std::logic_error("tconv stage must be 0, 1 or 2");
  }
}

template <Math M>
void configure_all() {
  configure_stage<M, 0, false>();
  configure_stage<M, 1, false>();
  configure_stage<M, 2, false>();
  configure_stage<M, 0, true>();
  configure_stage<M, 1, true>();
  configure_stage<M, 2, true>();
}

gpu::Math math_of(Precision p) {
  return p == Precision::Fp32 ? Math::Fp32 : p == Precision::Tf32 ? Math::Tf32 : Math::Bf16;
}

}  // namespace

const char* gemm_kernel_name(GemmKernel k) { return k == GemmKernel::Wgmma ? "wgmma" : "mma.sync"; }

DeviceNetwork::DeviceNetwork(const float* f, Precision precision) : precision_(precision) {
  const Layout L;
  std::vector<float> scale, shift;
  proj_weight_ = upload(std::vector<float>(f + L.proj_weight, f + L.proj_weight + int64_t{kLatentDim} * kProjOutputs));
  fold_batchnorm(f + L.bn[0], kStageChannels[0], f + L.proj_bias, kProjOutputs, &scale, &shift);
  proj_scale_ = upload(scale);
  proj_shift_ = upload(shift);
  for (int s = 0; s < 3; ++s) {
    const int c_in = kStageChannels[s], c_out = kStageChannels[s + 1];
    const float* w = f + L.tconv_weight[s];
    if (precision == Precision::Bf16)
      tconv_weight_[s] = upload(phase_matrices<__nv_bfloat16>(w, c_in, c_out, precision));
    else
      tconv_weight_[s] = upload(phase_matrices<float>(w, c_in, c_out, precision));
    fold_batchnorm(f + L.bn[s + 1], c_out, f + L.tconv_bias[s], c_out, &scale, &shift);
    tconv_scale_[s] = upload(scale);
    tconv_shift_[s] = upload(shift);
  }
  const int64_t out_w = int64_t{kTaps} * kTaps * kStageChannels[4] * kStageChannels[3];
  out_weight_ = upload(std::vector<float>(f + L.tconv_weight[3], f + L.tconv_weight[3] + out_w));
  out_bias_ = upload(std::vector<float>(f + L.tconv_bias[3], f + L.tconv_bias[3] + kStageChannels[4]));
  if (precision == Precision::Bf16) out_weight_fragments_ = setup_output_mma<Math::Bf16>(f + L.tconv_weight[3]);
  if (precision == Precision::Tf32) out_weight_fragments_ = setup_output_mma<Math::Tf32>(f + L.tconv_weight[3]);
  output_mma_possible_ = output_mma_ = out_weight_fragments_ != nullptr;
  CUDA_CHECK(cudaFuncSetAttribute(gpu::tconv_output_tanh<Math::Fp32>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 gpu::OutShape<Math::Fp32>::kSmemBytes));
  CUDA_CHECK(cudaFuncSetAttribute(gpu::tconv_output_tanh<Math::Bf16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 gpu::OutShape<Math::Bf16>::kSmemBytes));
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device));
  if (const char* tiles = std::getenv("FACEGEN_GPU_TILES")) {
    const std::string t = tiles;
    if (t != "small" && t != "large" && t != "auto")
      throw std::invalid_argument("FACEGEN_GPU_TILES must be small, large or auto, not '" + t + "'");
    tiles_ = t == "small" ? 1 : t == "large" ? 2 : 0;
  }
  switch (precision) {
    case Precision::Fp32: configure_all<Math::Fp32>(); break;
    case Precision::Tf32: configure_all<Math::Tf32>(); break;
    case Precision::Bf16: configure_all<Math::Bf16>(); break;
  }
  wgmma_available_ = precision != Precision::Fp32 && gpu::wgmma_available(device);
  if (wgmma_available_) {
    gpu::configure_wgmma(math_of(precision));
    wgmma_weights_.reset(new gpu::PhaseWeightMaps[3]);
    for (int s = 0; s < 3; ++s) gpu::make_phase_weight_maps(math_of(precision), s, tconv_weight_[s], &wgmma_weights_[s]);
  }
  gemm_ = wgmma_available_ ? GemmKernel::Wgmma : GemmKernel::MmaSync;
  if (const char* gemm = std::getenv("FACEGEN_GPU_GEMM")) {
    const std::string g = gemm;
    if (g != "mma" && g != "wgmma" && g != "auto")
      throw std::invalid_argument("FACEGEN_GPU_GEMM must be mma, wgmma or auto, not '" + g + "'");
    if (g != "auto") use_gemm_kernel(g == "wgmma" ? GemmKernel::Wgmma : GemmKernel::MmaSync);
  }
}

void DeviceNetwork::use_gemm_kernel(GemmKernel k) {
  if (k == GemmKernel::Wgmma && !wgmma_available_)
    throw std::invalid_argument(precision_ == Precision::Fp32
                                    ? "the wgmma kernels run tf32 and bf16, not fp32"
                                    : "the wgmma kernels need a compute capability 9.0 GPU and a build with 90a in CUDA_ARCH");
  gemm_ = k;
}

DeviceNetwork::~DeviceNetwork() {
  // cudaFree of null is a no-op; errors here cannot be reported from a destructor.
  cudaFree(proj_weight_);
  cudaFree(proj_scale_);
  cudaFree(proj_shift_);
  for (int s = 0; s < 3; ++s) {
    cudaFree(tconv_weight_[s]);
    cudaFree(tconv_scale_[s]);
    cudaFree(tconv_shift_[s]);
  }
  cudaFree(out_weight_);
  cudaFree(out_bias_);
  cudaFree(out_weight_fragments_);
}

size_t DeviceNetwork::activation_bytes_per_image(int stage) const {
  size_t elem = precision_ == Precision::Bf16 ? 2 : 4;
  return elem * kStageSize[stage] * kStageSize[stage] * kStageChannels[stage];
}

void DeviceNetwork::projection(const float* z, int n, void* act0, cudaStream_t stream) const {
  static_assert(kLatentDim % 4 == 0 && kLatentDim <= 128, "projection_bn_relu reads z four at a time, at most 128");
  static_assert(kProjOutputs % gpu::kProjColumnsPerBlock == 0, "projection blocks must tile the columns");
  if (n <= 0) return;
  dim3 grid(kProjOutputs / gpu::kProjColumnsPerBlock, (n + gpu::kProjImagesPerBlock - 1) / gpu::kProjImagesPerBlock);
  switch (precision_) {
    case Precision::Fp32:
      gpu::projection_bn_relu<Math::Fp32><<<grid, gpu::kProjThreads, 0, stream>>>(
          z, n, kLatentDim, kProjOutputs, proj_weight_, proj_scale_, proj_shift_, static_cast<float*>(act0));
      break;
    case Precision::Tf32:
      gpu::projection_bn_relu<Math::Tf32><<<grid, gpu::kProjThreads, 0, stream>>>(
          z, n, kLatentDim, kProjOutputs, proj_weight_, proj_scale_, proj_shift_, static_cast<float*>(act0));
      break;
    case Precision::Bf16:
      gpu::projection_bn_relu<Math::Bf16><<<grid, gpu::kProjThreads, 0, stream>>>(
          z, n, kLatentDim, kProjOutputs, proj_weight_, proj_scale_, proj_shift_,
          static_cast<__nv_bfloat16*>(act0));
      break;
  }
  CUDA_CHECK_LAUNCH();
}

void DeviceNetwork::tconv(int stage, const void* in, int n, void* out, cudaStream_t stream) const {
  if (n <= 0) return;
  if (gemm_ == GemmKernel::Wgmma) {
    // Same Small/Large rule as below: Small when the Large grid would leave SMs without two blocks.
    const bool small = tiles_ == 0 ? gpu::wgmma_large_blocks(stage, n) < 2 * int64_t{sm_count_} : tiles_ == 1;
    gpu::launch_tconv_wgmma(math_of(precision_), stage, small, in, n, wgmma_weights_[stage], tconv_scale_[stage],
                            tconv_shift_[stage], out, stream);
    return;
  }
  switch (precision_) {
    case Precision::Fp32:
      launch_tconv<Math::Fp32>(stage, sm_count_, tiles_, in, n, tconv_weight_[stage], tconv_scale_[stage], tconv_shift_[stage], out, stream);
      break;
    case Precision::Tf32:
      launch_tconv<Math::Tf32>(stage, sm_count_, tiles_, in, n, tconv_weight_[stage], tconv_scale_[stage], tconv_shift_[stage], out, stream);
      break;
    case Precision::Bf16:
      launch_tconv<Math::Bf16>(stage, sm_count_, tiles_, in, n, tconv_weight_[stage], tconv_scale_[stage], tconv_shift_[stage], out, stream);
      break;
  }
}

void DeviceNetwork::output_layer(const void* act3, int n, float* images, cudaStream_t stream) const {
  if (n <= 0) return;
  static_assert(gpu::kOutHin % gpu::kOutRowsPerBlock == 0, "output-layer blocks must tile the rows");
  if (output_mma_) {
    if (precision_ == Precision::Bf16)
      gpu::launch_tconv_output_tanh_mma<Math::Bf16>(act3, n, out_weight_fragments_, out_bias_, images, sm_count_, stream);
    else
      gpu::launch_tconv_output_tanh_mma<Math::Tf32>(act3, n, out_weight_fragments_, out_bias_, images, sm_count_, stream);
    return;
  }
  dim3 grid(gpu::kOutHin / gpu::kOutRowsPerBlock, n);
  if (precision_ == Precision::Bf16)
    gpu::tconv_output_tanh<Math::Bf16><<<grid, gpu::kOutThreads, gpu::OutShape<Math::Bf16>::kSmemBytes, stream>>>(
        static_cast<const __nv_bfloat16*>(act3), out_weight_, out_bias_, images);
  else
    gpu::tconv_output_tanh<Math::Fp32><<<grid, gpu::kOutThreads, gpu::OutShape<Math::Fp32>::kSmemBytes, stream>>>(
        static_cast<const float*>(act3), out_weight_, out_bias_, images);
  CUDA_CHECK_LAUNCH();
}

void DeviceNetwork::forward(const float* z, int n, void* const act[4], float* images,
                            cudaStream_t stream) const {
  projection(z, n, act[0], stream);
  for (int s = 0; s < 3; ++s) tconv(s, act[s], n, act[s + 1], stream);
  output_layer(act[3], n, images, stream);
}

double layer_flops_per_image(int layer) {
  if (layer == 0) return 2.0 * kLatentDim * kProjOutputs;
  const int s = layer - 1, h = kStageSize[s];
  return 2.0 * h * h * kTaps * kTaps * kStageChannels[s] * kStageChannels[s + 1];
}

}  // namespace facegen
