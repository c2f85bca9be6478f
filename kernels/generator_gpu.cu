// generator_gpu.cu: the network's weights rearranged for each layer's kernels, the choice of kernel
// per layer and device, and the fixed-shape kernels' launches (the any-shape ones are in
// kernels/generator_gpu_any.cu). The kernels and their launchers live one layer per file:
//   projection     kernels/projection.cuh (FFMA), kernels/projection_mma.cuh (tensor cores),
//                  kernels/projection_any.cuh (any nz and width)
//   tconv1-3       kernels/phase_gemm.cuh (mma.sync or FFMA, with their tile shapes),
//                  kernels/phase_gemm_wgmma.cuh (sm_90a row tiles), kernels/phase_gemm_wgmma_image.cuh
//                  (sm_90a, over whole images), kernels/tconv_any.cuh (any width)
//   tconv4 + tanh  kernels/tconv_output.cuh (direct), kernels/tconv_output_mma.cuh (tensor cores),
//                  kernels/tconv_output_any.cuh (any width, 1 or 3 channels)
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
#include "kernels/phase_weights.hpp"
#include "kernels/projection.cuh"
#include "kernels/projection_mma.cuh"
#include "kernels/tconv_output.cuh"
#include "kernels/phase_gemm_wgmma.hpp"
#include "kernels/tconv_output_mma.cuh"
#include "kernels/weight_folding.hpp"

namespace facegen {
namespace {

using gpu::Math;

template <typename T>
T* upload(const std::vector<T>& v) {
  T* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, v.size() * sizeof(T)));
  CUDA_CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

// tconv4 on tensor cores (kernels/tconv_output_mma.cuh): its weight fragments on the device, or null
// where the device cannot give a block the kernel's shared memory (then the direct kernel runs).
template <Math M, int KS>
uint32_t* setup_output_mma(const float* weight) {
  static_assert(kStageChannels[3] == 64 && kStageChannels[4] == 3 && kStageSize[3] == 32,
                "tconv_output_tanh_mma is written for 64 -> 3 channels at 32 x 32");
  constexpr int kSmem = gpu::OutputMmaShape<M, KS>::kSmemBytes;
  int device = 0, smem_optin = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (smem_optin < kSmem) return nullptr;  // sm_90: 227 KB; sm_80: 163 KB, sm_86/89: 99 KB
  CUDA_CHECK(cudaFuncSetAttribute(gpu::tconv_output_tanh_mma<M, KS>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  return upload(gpu::output_mma_weight_fragments<M, KS>(weight));
}

template <Math M>
uint32_t* setup_output_mma(int ksize, const float* weight) {
  return ksize == 4 ? setup_output_mma<M, 4>(weight) : setup_output_mma<M, 5>(weight);
}

}  // namespace

const char* gemm_kernel_name(GemmKernel k) { return k == GemmKernel::Wgmma ? "wgmma" : "mma.sync"; }

DeviceNetwork::DeviceNetwork(const float* f, const ModelSpec& spec, Precision precision)
    : spec_(spec), ksize_(spec.kernel_size), precision_(precision), math_(gpu::math_of(precision, false)) {
  const std::string why = model_spec_problem(spec);
  if (!why.empty()) throw std::invalid_argument("the CUDA kernels cannot run this network: " + why);
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const bool wgmma_device = gpu::wgmma_available(device);
  choose_layer_kernels();
  choose_fp32_kernel(device, wgmma_device);
  // wgmma runs tf32, bf16 and fp32 on tensor cores, not fp32 on FFMA.
  wgmma_available_ = wgmma_device && (precision != Precision::Fp32 || math_ == Math::Tf32x3);
  upload_weights(f);
  if (ksize_ == 4) gpu::configure_tconv_output_tanh<4>();
  else gpu::configure_tconv_output_tanh<5>();
  configure_any_shape_kernels(math_);
  CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device));
  if (const char* tiles = std::getenv("FACEGEN_GPU_TILES")) {
    const std::string t = tiles;
    if (t != "small" && t != "large" && t != "image" && t != "auto")
      throw std::invalid_argument("FACEGEN_GPU_TILES must be small, large, image or auto, not '" + t + "'");
    tiles_ = t == "small" ? 1 : t == "large" ? 2 : t == "image" ? 3 : 0;
  }
  gpu::with_math(math_, [](auto m) { gpu::configure_phase_gemms<decltype(m)::value>(); });
  if (wgmma_available_) {
    wgmma_weights_.reset(new gpu::PhaseWeightMaps[3]);
    if (math_ == Math::Tf32x3) {
      gpu::configure_wgmma_tf32x3();
      for (int s = 0; s < 3; ++s)
        if (fixed_[s + 1]) gpu::make_tf32x3_weight_maps(s, ksize_, tconv_weight_split_[s], &wgmma_weights_[s]);
    } else {
      gpu::configure_wgmma(math_);
      for (int s = 0; s < 3; ++s)
        if (fixed_[s + 1]) gpu::make_phase_weight_maps(math_, s, ksize_, tconv_weight_[s], &wgmma_weights_[s]);
    }
  }
  gemm_ = wgmma_available_ ? GemmKernel::Wgmma : GemmKernel::MmaSync;
  if (const char* gemm = std::getenv("FACEGEN_GPU_GEMM")) {
    const std::string g = gemm;
    if (g != "mma" && g != "wgmma" && g != "auto")
      throw std::invalid_argument("FACEGEN_GPU_GEMM must be mma, wgmma or auto, not '" + g + "'");
    if (g != "auto") use_gemm_kernel(g == "wgmma" ? GemmKernel::Wgmma : GemmKernel::MmaSync);
  }
}

void DeviceNetwork::choose_fp32_kernel(int device, bool wgmma_device) {
  int major = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  const bool tf32_mma = major >= 8;  // mma.sync with tf32 operands: sm_80 and later
  // By default fp32 runs on the tensor cores where its tconv stages run on wgmma (sm_90 with this
  // binary's sm_90a code, and the fixed-shape kernels: kernels/phase_gemm_wgmma_tf32x3.cuh), FFMA
  // elsewhere: on mma.sync the tensor-core form was as exact but only 1.07 times as fast at batch 8192
  // and 0.91 times at 64 (one H200, 2026-11-27, BENCHMARKS.md), and the any-shape kernels' tensor-core
  // form was not measured against FFMA. kFp32TensorCoresOnWgmma is the one switch.
  const bool on_wgmma = wgmma_device && fixed_shape(1);
  Fp32Kernel kernel = kFp32TensorCoresOnWgmma && on_wgmma ? Fp32Kernel::TensorCores : Fp32Kernel::Ffma;
  if (const char* choice = std::getenv("FACEGEN_GPU_FP32")) {  // checked whatever the precision
    const std::string c = choice;
    if (c != "tc" && c != "ffma" && c != "auto")
      throw std::invalid_argument("FACEGEN_GPU_FP32 must be tc, ffma or auto, not '" + c + "'");
    if (c == "tc" && !tf32_mma)
      throw std::invalid_argument("FACEGEN_GPU_FP32=tc: fp32 on tensor cores needs a GPU of compute capability 8.0 or later");
    if (c != "auto") kernel = c == "tc" ? Fp32Kernel::TensorCores : Fp32Kernel::Ffma;
  }
  if (precision_ != Precision::Fp32) return;  // tf32 and bf16 run their own arithmetic on tensor cores
  fp32_kernel_ = kernel;
  math_ = gpu::math_of(precision_, kernel == Fp32Kernel::TensorCores);
}

void DeviceNetwork::choose_layer_kernels() {
  // The fixed-shape kernels' shapes (the file comment of generator_gpu.hpp).
  const bool width = spec_.base_channels == kStageChannels[3];
  fixed_[0] = width && spec_.latent_dim == kLatentDim;
  fixed_[1] = fixed_[2] = fixed_[3] = width;
  fixed_[4] = width && spec_.image_channels == kStageChannels[4];
  if (const char* kernels = std::getenv("FACEGEN_GPU_KERNELS")) {
    const std::string k = kernels;
    if (k != "any" && k != "auto") throw std::invalid_argument("FACEGEN_GPU_KERNELS must be any or auto, not '" + k + "'");
    any_shape_only_ = k == "any";
  }
}

void DeviceNetwork::upload_weights(const float* f) {
  const WeightOffsets L(spec_);
  const int nz = spec_.latent_dim, k_out = spec_.proj_outputs();
  std::vector<float> scale, shift;
  nz_pad_ = (nz + 3) / 4 * 4;  // the any-shape projection reads z four at a time
  std::vector<float> w(static_cast<size_t>(nz_pad_) * k_out, 0.f);
  std::copy(f + L.proj_weight, f + L.proj_weight + int64_t{nz} * k_out, w.begin());
  proj_weight_ = upload(w);
  if (fixed_[0] && math_ != Math::Fp32) {
    proj_weight_fragments_ = upload(math_ == Math::Tf32x3
                                        ? gpu::projection_weight_fragments<Math::Tf32x3, kLatentDim>(f + L.proj_weight, kProjOutputs)
                                        : gpu::projection_weight_fragments<Math::Bf16, kLatentDim>(f + L.proj_weight, kProjOutputs));
    projection_mma_ = true;
  }
  fold_batchnorm(f + L.bn[0], spec_.stage_channels(0), f + L.proj_bias, k_out, &scale, &shift);
  proj_scale_ = upload(scale);
  proj_shift_ = upload(shift);
  for (int s = 0; s < 3; ++s) {
    const int c_in = spec_.stage_channels(s), c_out = spec_.stage_channels(s + 1);
    const float* tw = f + L.tconv_weight[s];
    if (math_ == Math::Bf16)
      tconv_weight_[s] = upload(phase_b_matrices<__nv_bfloat16>(tw, c_in, c_out, ksize_, math_));
    else
      tconv_weight_[s] = upload(phase_b_matrices<float>(tw, c_in, c_out, ksize_, math_));
    if (math_ == Math::Tf32x3 && wgmma_available_ && fixed_[s + 1])
      tconv_weight_split_[s] = upload(phase_b_split_matrices(tw, c_in, c_out, ksize_));
    fold_batchnorm(f + L.bn[s + 1], c_out, f + L.tconv_bias[s], c_out, &scale, &shift);
    tconv_scale_[s] = upload(scale);
    tconv_shift_[s] = upload(shift);
  }
  const float* ow = f + L.tconv_weight[3];
  const int64_t out_w = int64_t{ksize_} * ksize_ * spec_.stage_channels(4) * spec_.stage_channels(3);
  out_weight_ = upload(std::vector<float>(ow, ow + out_w));
  out_bias_ = upload(std::vector<float>(f + L.tconv_bias[3], f + L.tconv_bias[3] + spec_.stage_channels(4)));
  if (fixed_[4] && math_ == Math::Bf16) out_weight_fragments_ = setup_output_mma<Math::Bf16>(ksize_, ow);
  if (fixed_[4] && math_ == Math::Tf32) out_weight_fragments_ = setup_output_mma<Math::Tf32>(ksize_, ow);
  if (fixed_[4] && math_ == Math::Tf32x3) out_weight_fragments_ = setup_output_mma<Math::Tf32x3>(ksize_, ow);
  output_mma_possible_ = output_mma_ = out_weight_fragments_ != nullptr;
}

void DeviceNetwork::use_gemm_kernel(GemmKernel k) {
  if (k == GemmKernel::Wgmma && !wgmma_available_)
    throw std::invalid_argument(math_ == Math::Fp32
                                    ? "the wgmma kernels run tf32, bf16 and fp32 on tensor cores, not fp32 on FFMA"
                                    : "the wgmma kernels need a compute capability 9.0 GPU and a build with 90a in CUDA_ARCH");
  gemm_ = k;
}

void DeviceNetwork::use_fp32_wgmma_schedule(int schedule) {
  if (schedule < 0 || schedule > 2) throw std::invalid_argument("the fp32 wgmma kernels have schedules 0, 1 and 2");
  fp32_wgmma_schedule_ = schedule;
}

void DeviceNetwork::use_wgmma_image(int stage, bool on, int ring) {
  if (stage < 0 || stage > 2 || ring < 0 || ring > 1)
    throw std::invalid_argument("the wgmma image kernel runs tconv stages 0..2 in rings 0 and 1");
  wgmma_image_[stage] = on ? ImageUse::Always : ImageUse::Never;
  image_ring_[stage] = ring;
}

void DeviceNetwork::use_wgmma_image_by_grid() {
  for (int s = 0; s < 3; ++s) {
    wgmma_image_[s] = ImageUse::ByGrid;
    image_ring_[s] = 0;
  }
}

DeviceNetwork::~DeviceNetwork() {
  // cudaFree of null is a no-op; errors here cannot be reported from a destructor.
  cudaFree(proj_weight_);
  cudaFree(proj_weight_fragments_);
  cudaFree(proj_scale_);
  cudaFree(proj_shift_);
  for (int s = 0; s < 3; ++s) {
    cudaFree(tconv_weight_[s]);
    cudaFree(tconv_weight_split_[s]);
    cudaFree(tconv_scale_[s]);
    cudaFree(tconv_shift_[s]);
  }
  cudaFree(out_weight_);
  cudaFree(out_bias_);
  cudaFree(out_weight_fragments_);
}

size_t DeviceNetwork::activation_bytes_per_image(int stage) const {
  const size_t elem = precision_ == Precision::Bf16 ? 2 : 4;
  const size_t h = ModelSpec::stage_size(stage);
  return elem * h * h * spec_.stage_channels(stage);
}

void DeviceNetwork::projection(const float* z, int n, void* act0, cudaStream_t stream) const {
  if (n <= 0) return;
  if (!fixed_shape(0)) {
    projection_any(z, n, act0, stream);
    return;
  }
  static_assert(kLatentDim % 4 == 0 && kLatentDim <= 128, "projection_bn_relu reads z four at a time, at most 128");
  static_assert(kProjOutputs % gpu::kProjColumnsPerBlock == 0, "projection blocks must tile the columns");
  static_assert(kProjOutputs % gpu::ProjectionMmaShape<kLatentDim>::kColumns == 0, "projection_mma blocks must tile the columns");
  if (projection_mma_) {
    if (math_ == Math::Bf16)
      gpu::launch_projection_bn_relu_mma<Math::Bf16, kLatentDim>(z, n, kProjOutputs, proj_weight_fragments_, proj_scale_, proj_shift_, act0, stream);
    else if (math_ == Math::Tf32x3)
      gpu::launch_projection_bn_relu_mma<Math::Tf32x3, kLatentDim>(z, n, kProjOutputs, proj_weight_fragments_, proj_scale_, proj_shift_, act0, stream);
    else
      gpu::launch_projection_bn_relu_mma<Math::Tf32, kLatentDim>(z, n, kProjOutputs, proj_weight_fragments_, proj_scale_, proj_shift_, act0, stream);
    return;
  }
  gpu::with_ffma_math(math_, [&](auto m) {
    gpu::launch_projection_bn_relu<decltype(m)::value>(z, n, kLatentDim, kProjOutputs, proj_weight_, proj_scale_,
                                                       proj_shift_, act0, stream);
  });
}

void DeviceNetwork::tconv(int stage, const void* in, int n, void* out, cudaStream_t stream) const {
  if (stage < 0 || stage > 2) throw std::logic_error("tconv stage must be 0, 1 or 2");
  if (n <= 0) return;
  if (!fixed_shape(stage + 1)) {
    tconv_any(stage, in, n, out, stream);
    return;
  }
  if (gemm_ == GemmKernel::Wgmma && math_ == Math::Tf32x3) {
    // fp32 on tensor cores: the row tiles alone (one block an SM in either shape), Small where the
    // Large grid would leave half the SMs idle (tconv1 at batch 64), Large elsewhere and under
    // FACEGEN_GPU_TILES=image; the same bits in every shape and schedule.
    const bool small = tiles_ == 0 ? 2 * gpu::wgmma_tf32x3_large_blocks(stage, n) < int64_t{sm_count_} : tiles_ == 1;
    gpu::launch_tconv_wgmma_tf32x3(stage, small, fp32_wgmma_schedule_, static_cast<const float*>(in), n,
                                   wgmma_weights_[stage], tconv_scale_[stage], tconv_shift_[stage],
                                   static_cast<float*>(out), stream);
    return;
  }
  // The image kernel where its grid gives every SM a block (tconv1's groups of eight images and
  // tconv2's of four leave most SMs idle at batch 64, where the row tiles are faster), or where
  // FACEGEN_GPU_TILES=image or use_wgmma_image forces it. The row tiles and the image kernel give the
  // same bits (the GPU tests compare their bytes), so the batch size still decides nothing about the values.
  const ImageUse use = wgmma_image_[stage];
  const bool image = use == ImageUse::Always ||
                     (use == ImageUse::ByGrid && (tiles_ == 3 || (tiles_ == 0 && gpu::wgmma_image_blocks(stage, n) >= sm_count_)));
  if (gemm_ == GemmKernel::Wgmma && image) {
    gpu::launch_tconv_wgmma_image(math_, stage, image_ring_[stage], in, n, wgmma_weights_[stage],
                                  tconv_scale_[stage], tconv_shift_[stage], out, stream);
    return;
  }
  if (gemm_ == GemmKernel::Wgmma) {
    // Same Small/Large rule as below: Small when the Large grid would leave SMs without two blocks.
    const bool small = tiles_ == 0 ? gpu::wgmma_large_blocks(stage, n) < 2 * int64_t{sm_count_} : tiles_ == 1;
    // (FACEGEN_GPU_TILES=image: Large where the image kernel does not run.)
    gpu::launch_tconv_wgmma(math_, stage, small, in, n, wgmma_weights_[stage], tconv_scale_[stage],
                            tconv_shift_[stage], out, stream);
    return;
  }
  const int rows = tiles_ == 3 ? 2 : tiles_;  // the mma.sync kernels have no image form: Large
  gpu::with_math(math_, [&](auto m) {
    gpu::launch_tconv_phase_gemm<decltype(m)::value>(stage, ksize_, sm_count_, rows, in, n, tconv_weight_[stage],
                                                     tconv_scale_[stage], tconv_shift_[stage], out, stream);
  });
}

template <int KS>
void DeviceNetwork::output_layer_k(const void* act3, int n, float* images, cudaStream_t stream) const {
  if (output_mma_) {
    if (math_ == Math::Bf16)
      gpu::launch_tconv_output_tanh_mma<Math::Bf16, KS>(act3, n, out_weight_fragments_, out_bias_, images, sm_count_, stream);
    else if (math_ == Math::Tf32x3)
      gpu::launch_tconv_output_tanh_mma<Math::Tf32x3, KS>(act3, n, out_weight_fragments_, out_bias_, images, sm_count_, stream);
    else
      gpu::launch_tconv_output_tanh_mma<Math::Tf32, KS>(act3, n, out_weight_fragments_, out_bias_, images, sm_count_, stream);
    return;
  }
  if (precision_ == Precision::Bf16)
    gpu::launch_tconv_output_tanh<Math::Bf16, KS>(act3, n, out_weight_, out_bias_, images, stream);
  else
    gpu::launch_tconv_output_tanh<Math::Fp32, KS>(act3, n, out_weight_, out_bias_, images, stream);
}

void DeviceNetwork::output_layer(const void* act3, int n, float* images, cudaStream_t stream) const {
  if (n <= 0) return;
  if (!fixed_shape(4)) output_layer_any(act3, n, images, stream);
  else if (ksize_ == 4) output_layer_k<4>(act3, n, images, stream);
  else output_layer_k<5>(act3, n, images, stream);
}

void DeviceNetwork::forward(const float* z, int n, void* const act[4], float* images,
                            cudaStream_t stream) const {
  projection(z, n, act[0], stream);
  for (int s = 0; s < 3; ++s) tconv(s, act[s], n, act[s + 1], stream);
  output_layer(act[3], n, images, stream);
}

double layer_flops_per_image(const ModelSpec& spec, int layer) {
  if (layer == 0) return 2.0 * spec.latent_dim * spec.proj_outputs();
  const int s = layer - 1, h = ModelSpec::stage_size(s), k = spec.kernel_size;
  return 2.0 * h * h * k * k * spec.stage_channels(s) * spec.stage_channels(s + 1);
}

}  // namespace facegen
