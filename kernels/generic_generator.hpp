// generic_generator.hpp: any generator of the family (common/model_spec.hpp) on a CUDA GPU, for the
// networks the tuned kernels (kernels/generator_gpu.hpp: nz 100, ngf 64, nc 3) are not written for:
// kernel size 4 or 5, base_channels g a multiple of 16 from 16 to 256, nz 1..1024, nc 1 or 3, with or
// without biases.
//
// The weights arrive in the flat float layout of generator/network.hpp, generalised by the spec:
//   proj weight (nz, 16 * 8g) (columns the (4, 4, 8g) map in HWC order), proj bias (16 * 8g),
//   bn0 beta, gamma, mean, var (8g each); for stage s = 0..3: tconv weight (k, k, c_out, c_in),
//   tconv bias (c_out), then (s < 3) the next batch norm (4 x c_out); absent biases are zeros.
// They are rearranged once for one precision: batch norms folded into per-channel scale/shift
// epilogues, the three hidden tconvs split into four phase-GEMM matrices each (kernels/tconv_any.cuh).
// Activations (n, H, W, C), C fastest, float32 (fp32; tf32-rounded for tf32) or bfloat16:
//   z (n, nz) -> act0 (n, 4, 4, 8g) -> act1 (n, 8, 8, 4g) -> act2 (n, 16, 16, 2g)
//   -> act3 (n, 32, 32, g) -> images (n, 64, 64, nc) float32
// Every output value's arithmetic is the same for any batch size and position in the batch.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/model_spec.hpp"
#include "common/precision.hpp"

namespace facegen {

// Empty when the generic CUDA path runs `spec`, else one sentence saying which value it cannot take.
std::string generic_gpu_unsupported(const ModelSpec& spec);

class GenericDeviceNetwork {
 public:
  // floats: the flat layout above (Network::float_count(spec) of them). Throws std::invalid_argument
  // for a spec outside the range above.
  GenericDeviceNetwork(const float* floats, const ModelSpec& spec, Precision precision);
  ~GenericDeviceNetwork();
  GenericDeviceNetwork(const GenericDeviceNetwork&) = delete;
  GenericDeviceNetwork& operator=(const GenericDeviceNetwork&) = delete;

  const ModelSpec& spec() const { return spec_; }
  Precision precision() const { return precision_; }
  // Bytes of one image's activation before stage s (0: after the projection .. 3: before the last tconv).
  size_t activation_bytes_per_image(int stage) const;

  // z (n, nz) float32 -> act0.
  void projection(const float* z, int n, void* act0, cudaStream_t stream) const;
  // act_s -> act_{s+1} for s = 0, 1, 2: relu(bn_{s+1}(tconv_s(act_s) + bias_s)).
  void tconv(int stage, const void* in, int n, void* out, cudaStream_t stream) const;
  // act3 -> images: tanh(tconv_3(act3) + bias_3).
  void output_layer(const void* act3, int n, float* images, cudaStream_t stream) const;
  // All five layers; act holds the four activations, each sized for n images.
  void forward(const float* z, int n, void* const act[4], float* images, cudaStream_t stream) const;

 private:
  ModelSpec spec_;
  Precision precision_;
  int nz_pad_ = 0;                // nz rounded up to 4: rows of proj_weight_
  float* proj_weight_ = nullptr;  // (nz_pad, 16 * 8g), rows nz.. zero
  float* proj_scale_ = nullptr;   // (16 * 8g)
  float* proj_shift_ = nullptr;
  void* tconv_weight_[3] = {};    // four phase B matrices each (kernels/tconv_any.cuh)
  float* tconv_scale_[3] = {};
  float* tconv_shift_[3] = {};
  float* out_weight_ = nullptr;   // (k, k, nc, g)
  float* out_bias_ = nullptr;     // (nc)
};

}  // namespace facegen
