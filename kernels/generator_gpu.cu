// generator_gpu.cu: the network's weights rearranged for each layer's kernels, and the choice of kernel
// per layer and device. The kernels and their launchers live one layer per file:
//   projection     kernels/projection.cuh (FFMA), kernels/projection_mma.cuh (tensor cores)
//   tconv1-3       kernels/phase_gemm.cuh (mma.sync or FFMA, with their tile shapes),
//                  kernels/phase_gemm_wgmma.cuh (sm_90a row tiles), kernels/phase_gemm_wgmma_image.cuh
//                  (sm_90a, over whole images)
//   tconv4 + tanh  kernels/tconv_output.cuh (direct), kernels/tconv_output_mma.cuh (tensor cores)
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
#include "kernels/projection.cuh"
#include "kernels/projection_mma.cuh"
#include "kernels/tconv_output.cuh"
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

gpu::Math math_of(Precision p) {
  return p == Precision::Fp32 ? Math::Fp32 : p == Precision::Tf32 ? Math::Tf32 : Math::Bf16;
}

}  // namespace

const char* gemm_kernel_name(GemmKernel k) { return k == GemmKernel::Wgmma ? "wgmma" : "mma.sync"; }

DeviceNetwork::DeviceNetwork(const float* f, Precision precision) : precision_(precision) {
  const Layout L;
  std::vector<float> scale, shift;
  proj_weight_ = upload(std::vector<float>(f + L.proj_weight, f + L.proj_weight + int64_t{kLatentDim} * kProjOutputs));
  if (precision != Precision::Fp32) {
    proj_weight_fragments_ = upload(gpu::projection_weight_fragments<kLatentDim>(f + L.proj_weight, kProjOutputs));
    projection_mma_ = true;
  }
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
  gpu::configure_tconv_output_tanh();
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device));
  if (const char* tiles = std::getenv("FACEGEN_GPU_TILES")) {
    const std::string t = tiles;
    if (t != "small" && t != "large" && t != "image" && t != "auto")
      throw std::invalid_argument("FACEGEN_GPU_TILES must be small, large, image or auto, not '" + t + "'");
    tiles_ = t == "small" ? 1 : t == "large" ? 2 : t == "image" ? 3 : 0;
  }
  switch (precision) {
    case Precision::Fp32: gpu::configure_phase_gemms<Math::Fp32>(); break;
    case Precision::Tf32: gpu::configure_phase_gemms<Math::Tf32>(); break;
    case Precision::Bf16: gpu::configure_phase_gemms<Math::Bf16>(); break;
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
  static_assert(kProjOutputs % gpu::ProjectionMmaShape<kLatentDim>::kColumns == 0, "projection_mma blocks must tile the columns");
  if (projection_mma_) {
    if (precision_ == Precision::Bf16)
      gpu::launch_projection_bn_relu_mma<Math::Bf16, kLatentDim>(z, n, kProjOutputs, proj_weight_fragments_, proj_scale_, proj_shift_, act0, stream);
    else
      gpu::launch_projection_bn_relu_mma<Math::Tf32, kLatentDim>(z, n, kProjOutputs, proj_weight_fragments_, proj_scale_, proj_shift_, act0, stream);
    return;
  }
  switch (precision_) {
    case Precision::Fp32:
      gpu::launch_projection_bn_relu<Math::Fp32>(z, n, kLatentDim, kProjOutputs, proj_weight_, proj_scale_, proj_shift_, act0, stream);
      break;
    case Precision::Tf32:
      gpu::launch_projection_bn_relu<Math::Tf32>(z, n, kLatentDim, kProjOutputs, proj_weight_, proj_scale_, proj_shift_, act0, stream);
      break;
    case Precision::Bf16:
      gpu::launch_projection_bn_relu<Math::Bf16>(z, n, kLatentDim, kProjOutputs, proj_weight_, proj_scale_, proj_shift_, act0, stream);
      break;
  }
}

void DeviceNetwork::tconv(int stage, const void* in, int n, void* out, cudaStream_t stream) const {
  if (n <= 0) return;
  // The image kernel where its grid gives every SM a block (tconv1's groups of eight images and
  // tconv2's of four leave most SMs idle at batch 64, where the row tiles are faster), or where
  // FACEGEN_GPU_TILES=image or use_wgmma_image forces it. The row tiles and the image kernel give the
  // same bits (the GPU tests compare their bytes), so the batch size still decides nothing about the values.
  const ImageUse use = wgmma_image_[stage];
  const bool image = use == ImageUse::Always ||
                     (use == ImageUse::ByGrid && (tiles_ == 3 || (tiles_ == 0 && gpu::wgmma_image_blocks(stage, n) >= sm_count_)));
  if (gemm_ == GemmKernel::Wgmma && image) {
    gpu::launch_tconv_wgmma_image(math_of(precision_), stage, image_ring_[stage], in, n, wgmma_weights_[stage],
                                  tconv_scale_[stage], tconv_shift_[stage], out, stream);
    return;
  }
  if (gemm_ == GemmKernel::Wgmma) {
    // Same Small/Large rule as below: Small when the Large grid would leave SMs without two blocks.
    const bool small = tiles_ == 0 ? gpu::wgmma_large_blocks(stage, n) < 2 * int64_t{sm_count_} : tiles_ == 1;
    // (FACEGEN_GPU_TILES=image: Large where the image kernel does not run.)
    gpu::launch_tconv_wgmma(math_of(precision_), stage, small, in, n, wgmma_weights_[stage], tconv_scale_[stage],
                            tconv_shift_[stage], out, stream);
    return;
  }
  const int rows = tiles_ == 3 ? 2 : tiles_;  // the mma.sync kernels have no image form: Large
  switch (precision_) {
    case Precision::Fp32:
      gpu::launch_tconv_phase_gemm<Math::Fp32>(stage, sm_count_, rows, in, n, tconv_weight_[stage], tconv_scale_[stage], tconv_shift_[stage], out, stream);
      break;
    case Precision::Tf32:
      gpu::launch_tconv_phase_gemm<Math::Tf32>(stage, sm_count_, rows, in, n, tconv_weight_[stage], tconv_scale_[stage], tconv_shift_[stage], out, stream);
      break;
    case Precision::Bf16:
      gpu::launch_tconv_phase_gemm<Math::Bf16>(stage, sm_count_, rows, in, n, tconv_weight_[stage], tconv_scale_[stage], tconv_shift_[stage], out, stream);
      break;
  }
}

void DeviceNetwork::output_layer(const void* act3, int n, float* images, cudaStream_t stream) const {
  if (n <= 0) return;
  if (output_mma_) {
    if (precision_ == Precision::Bf16)
      gpu::launch_tconv_output_tanh_mma<Math::Bf16>(act3, n, out_weight_fragments_, out_bias_, images, sm_count_, stream);
    else
      gpu::launch_tconv_output_tanh_mma<Math::Tf32>(act3, n, out_weight_fragments_, out_bias_, images, sm_count_, stream);
    return;
  }
  if (precision_ == Precision::Bf16)
    gpu::launch_tconv_output_tanh<Math::Bf16>(act3, n, out_weight_, out_bias_, images, stream);
  else
    gpu::launch_tconv_output_tanh<Math::Fp32>(act3, n, out_weight_, out_bias_, images, stream);
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
