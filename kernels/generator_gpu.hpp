// generator_gpu.hpp: the generator on a CUDA GPU, every network of the family (common/model_spec.hpp:
// nz 1..1024, ngf 16..256 a multiple of 16, nc 1 or 3, 4x4 or 5x5 kernels), one layer at a time,
// each transposed convolution as phase GEMMs with fused epilogues.
//
// DeviceNetwork holds one network's weights on the device, rearranged once for one precision:
// batch norms folded into per-channel scale/shift epilogues of the layer before them, transposed
// convolution weights split into the four phase GEMM matrices (kernels/phase_weights.hpp). Each
// layer has two kinds of kernels, and the layer's shape picks:
//   fixed-shape kernels, compiled for the SHPC network's and the PyTorch tutorial's widths (nz 100,
//     ngf 64, nc 3): the projection (kernels/projection.cuh, projection_mma.cuh), tconv1-3
//     (kernels/phase_gemm.cuh, and wgmma with TMA on Hopper: phase_gemm_wgmma.cuh,
//     phase_gemm_wgmma_image.cuh) and tconv4 (tconv_output.cuh, tconv_output_mma.cuh); the
//     projection where nz is 100 and ngf 64, tconv1-3 where ngf is 64, tconv4 where ngf is 64 and nc 3;
//   any-shape kernels, sizes known at run time (kernels/projection_any.cuh, tconv_any.cuh,
//     tconv_output_any.cuh), for every other layer, at about a quarter of the bf16 rate.
// FACEGEN_GPU_KERNELS=any runs every layer on the any-shape kernels (the benchmark's and the tests'
// comparison). --precision fp32 runs on the tensor cores as float32 (Fp32Kernel below) or on FFMA.
// Activations between layers are (n, H, W, C), C fastest, float32 (fp32, tf32 rounded for tf32) or
// bfloat16 (bf16), g = ngf:
//   z (n, nz) -> act0 (n, 4, 4, 8g) -> act1 (n, 8, 8, 4g) -> act2 (n, 16, 16, 2g)
//   -> act3 (n, 32, 32, g) -> images (n, 64, 64, nc) float32
// Every output value's arithmetic is the same for any batch size and position in the batch.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/model_spec.hpp"
#include "common/precision.hpp"

namespace facegen {

namespace gpu {
struct PhaseWeightMaps;
enum class Math;  // kernels/cuda_helpers.cuh
}

// Which kernels run the tconv stages' phase GEMMs in tf32, bf16 and fp32 on tensor cores: mma.sync
// (kernels/phase_gemm.cuh, any GPU from sm_80) or wgmma with TMA (kernels/phase_gemm_wgmma.cuh,
// kernels/phase_gemm_wgmma_tf32x3.cuh; sm_90a). fp32 on FFMA runs the FFMA kernels.
enum class GemmKernel { MmaSync, Wgmma };
const char* gemm_kernel_name(GemmKernel k);

// How --precision fp32 computes: on the tensor cores, each float32 operand split into two tf32 parts
// and three products per term, every k step's products added into a per-tap sum in round-to-nearest
// float32 (TensorCores, "3xTF32": kernels/cuda_helpers.cuh, mma_tf32x3_step, and its wgmma form
// kernels/phase_gemm_wgmma_tf32x3.cuh; as accurate as FFMA, docs/gpu.md), or by float32 FFMA (Ffma).
// By default (auto) TensorCores where the tconv stages run the wgmma kernels (a compute capability
// 9.0 GPU, a binary with sm_90a code, and a network whose tconv stages have the fixed-shape kernels'
// width), Ffma elsewhere, where the mma.sync form is not fast enough to be worth other bytes
// (docs/gpu.md); kFp32TensorCoresOnWgmma = false would make Ffma the default everywhere.
// FACEGEN_GPU_FP32=tc|ffma|auto chooses when a network is made (tc where the GPU lacks tf32 mma,
// before compute capability 8.0, is an error); on tensor cores the tconv stages run wgmma or mma.sync
// as GemmKernel says (FACEGEN_GPU_GEMM=mma picks mma.sync on an H100 or H200). The layers whose shape
// only the any-shape kernels run keep FFMA for the projection and the last layer, as tf32 does.
enum class Fp32Kernel { TensorCores, Ffma };
constexpr bool kFp32TensorCoresOnWgmma = true;

// The layers of DeviceNetwork: 0 the projection, 1..3 tconv1-3, 4 the last tconv.
constexpr int kGpuLayers = 5;

class DeviceNetwork {
 public:
  // network_floats: the flat layout of generator/network.hpp for `spec` (for kShpcSpec, a
  // network.bin's kNetworkFloats floats). Throws std::invalid_argument where model_spec_problem
  // (common/model_spec.hpp) says the spec is outside the family's range.
  DeviceNetwork(const float* network_floats, const ModelSpec& spec, Precision precision);
  ~DeviceNetwork();
  DeviceNetwork(const DeviceNetwork&) = delete;
  DeviceNetwork& operator=(const DeviceNetwork&) = delete;

  Precision precision() const { return precision_; }
  // fp32 networks: the kernels chosen at construction (always Ffma for tf32 and bf16, whose own
  // arithmetic is on tensor cores).
  Fp32Kernel fp32_kernel() const { return fp32_kernel_; }
  const ModelSpec& spec() const { return spec_; }
  // Whether layer l (0..kGpuLayers-1) runs its fixed-shape kernels: where its shape is theirs, unless
  // FACEGEN_GPU_KERNELS=any or use_any_shape_kernels said otherwise.
  bool fixed_shape(int layer) const { return fixed_[layer] && !any_shape_only_; }
  // For the benchmark and the tests: every layer on the any-shape kernels (on), or each on the
  // fastest its shape allows (off, the default).
  void use_any_shape_kernels(bool on) { any_shape_only_ = on; }
  // Chosen at construction: Wgmma on a compute capability 9.0 device when this binary carries sm_90a
  // code and the precision is tf32, bf16 or fp32 on tensor cores, MmaSync otherwise;
  // FACEGEN_GPU_GEMM=mma|wgmma|auto overrides (wgmma where it cannot run is an error).
  GemmKernel gemm_kernel() const { return gemm_; }
  // The same override for the benchmark and the tests; throws std::invalid_argument where Wgmma cannot run.
  void use_gemm_kernel(GemmKernel k);
  // fp32 on tensor cores with Wgmma: schedule 0 (the default), 1 (the same bits) or 2 (an FADD every
  // two k steps: other bits) of the kernels (kernels/phase_gemm_wgmma.hpp, launch_tconv_wgmma_tf32x3),
  // for the benchmark and the tests. Throws std::invalid_argument for any other value.
  void use_fp32_wgmma_schedule(int schedule);
  // With Wgmma, each tconv stage runs the image kernel (kernels/phase_gemm_wgmma_image.cuh) where its
  // grid gives every SM a block, the row tiles elsewhere (the default). For the benchmark and the
  // tests: use_wgmma_image forces the image kernel (on, in ring 0 or 1: launch_tconv_wgmma_image) or
  // the row tiles (off) for one stage; use_wgmma_image_by_grid restores the default.
  void use_wgmma_image(int stage, bool on, int ring = 0);
  void use_wgmma_image_by_grid();
  // Bytes of one image's activation before stage s (0: after the projection .. 3: before the last tconv).
  size_t activation_bytes_per_image(int stage) const;

  // tf32, bf16 and fp32 on tensor cores: the projection on tensor cores (kernels/projection_mma.cuh,
  // the default) or the FFMA kernel (kernels/projection.cuh), for the benchmark and the tests; fp32 on
  // FFMA runs FFMA.
  void use_projection_mma(bool on) { projection_mma_ = on && proj_weight_fragments_ != nullptr; }
  bool projection_mma() const { return projection_mma_; }
  // z (n, nz) float32 -> act0.
  void projection(const float* z, int n, void* act0, cudaStream_t stream) const;
  // act_s -> act_{s+1} for s = 0, 1, 2: relu(bn_{s+1}(tconv_s(act_s) + bias_s)). Small batches get
  // smaller tiles (more blocks); the bits of every output stay the same.
  void tconv(int stage, const void* in, int n, void* out, cudaStream_t stream) const;
  // bf16, tf32 and fp32 on tensor cores: tconv4 on tensor cores (kernels/tconv_output_mma.cuh, the
  // default where the device gives a block its shared memory (k 5: bf16 185 KB, sm_90; tf32 and fp32
  // 159 KB, sm_80 and sm_90) or the direct FFMA kernel (kernels/tconv_output.cuh), for the benchmark
  // and the tests; fp32 on FFMA runs FFMA.
  void use_output_mma(bool on) { output_mma_ = on && output_mma_possible_; }
  bool output_mma() const { return output_mma_; }
  // act3 -> images: tanh(tconv_3(act3) + bias_3).
  void output_layer(const void* act3, int n, float* images, cudaStream_t stream) const;
  // All five layers; act holds the four activations, each sized for n images.
  void forward(const float* z, int n, void* const act[4], float* images, cudaStream_t stream) const;

 private:
  // Construction: how fp32 computes (fp32_kernel_, math_, FACEGEN_GPU_FP32), which layers run the
  // fixed-shape kernels (fixed_, FACEGEN_GPU_KERNELS), and every weight on the device in the layout of
  // the kernels that read it.
  void choose_fp32_kernel(int device, bool wgmma_device);
  void choose_layer_kernels();
  void upload_weights(const float* network_floats);
  template <int KS> void output_layer_k(const void* act3, int n, float* images, cudaStream_t stream) const;
  // The any-shape layers (kernels/generator_gpu_any.cu), and their kernels' shared-memory limits.
  static void configure_any_shape_kernels(gpu::Math math);
  void projection_any(const float* z, int n, void* act0, cudaStream_t stream) const;
  void tconv_any(int stage, const void* in, int n, void* out, cudaStream_t stream) const;
  void output_layer_any(const void* act3, int n, float* images, cudaStream_t stream) const;

  ModelSpec spec_;
  int ksize_;                     // spec_.kernel_size: 5 or 4
  Precision precision_;
  Fp32Kernel fp32_kernel_ = Fp32Kernel::Ffma;
  gpu::Math math_;                // the kernels' flavour: precision_, and for fp32 fp32_kernel_
  bool fixed_[kGpuLayers] = {};   // the layer's shape is the fixed-shape kernels' (see the file comment)
  bool any_shape_only_ = false;   // FACEGEN_GPU_KERNELS=any, use_any_shape_kernels
  int sm_count_ = 0;              // of the device the network lives on; picks tile shapes (tconv)
  int tiles_ = 0;                 // FACEGEN_GPU_TILES: 0 auto, by grid size; 1 always Small; 2 always
                                  // Large; 3 the wgmma image kernel where it runs, Large elsewhere
  bool wgmma_available_ = false;  // sm_90, sm_90a code in the binary, and a precision wgmma runs (not fp32 FFMA)
  GemmKernel gemm_ = GemmKernel::MmaSync;
  enum class ImageUse { ByGrid, Always, Never };
  ImageUse wgmma_image_[3] = {ImageUse::ByGrid, ImageUse::ByGrid, ImageUse::ByGrid};
  int image_ring_[3] = {};
  int fp32_wgmma_schedule_ = 0;   // use_fp32_wgmma_schedule
  bool output_mma_possible_ = false;  // bf16 or tf32, and enough shared memory per block for it
  bool output_mma_ = false;       // tconv4 on tensor cores
  bool projection_mma_ = false;   // the projection on tensor cores
  std::unique_ptr<gpu::PhaseWeightMaps[]> wgmma_weights_;  // tensor maps over the fixed-shape tconv_weight_
  int nz_pad_ = 0;                // nz rounded up to 4: rows of proj_weight_ (100 for the fixed shape)
  float* proj_weight_ = nullptr;  // (nz_pad, 16 * 8g), rows nz.. zero
  uint32_t* proj_weight_fragments_ = nullptr;  // fixed shape on tensor cores: the same as mma fragments (projection_mma.cuh)
  float* proj_scale_ = nullptr;   // (16 * 8g)
  float* proj_shift_ = nullptr;   // (16 * 8g)
  void* tconv_weight_[3] = {};    // four phase B matrices each, see phase_gemm.cuh
  float* tconv_weight_split_[3] = {};  // fp32 on wgmma, fixed shape: the same as tf32 parts (phase_b_split_matrices)
  float* tconv_scale_[3] = {};
  float* tconv_shift_[3] = {};
  float* out_weight_ = nullptr;   // (k, k, nc, g)
  float* out_bias_ = nullptr;     // (nc)
  uint32_t* out_weight_fragments_ = nullptr;  // fixed shape on tensor cores: the same weights as mma fragments (tconv_output_mma.cuh)
};

// Floating-point operations of one image, per layer (0: projection, 1..3: phase GEMMs, 4: the last
// tconv), counted as 2 * input pixels * k^2 taps * c_in * c_out (the SHPC network's 326 MFLOP per
// image, the tutorial generator's 209; taps that fall outside the output, about 11% of them for
// k 5, are counted too).
double layer_flops_per_image(const ModelSpec& spec, int layer);

}  // namespace facegen
