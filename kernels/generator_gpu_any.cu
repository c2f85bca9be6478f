// generator_gpu_any.cu: DeviceNetwork's layers on the any-shape kernels, the sizes known only at run
// time (kernels/projection_any.cuh, tconv_any.cuh, tconv_output_any.cuh): every layer whose shape the
// fixed-shape kernels are not compiled for, and every layer under FACEGEN_GPU_KERNELS=any. The weights
// are DeviceNetwork's own (kernels/generator_gpu.cu prepares one set for both kinds of kernel).
#include <stdexcept>

#include "common/cuda_check.cuh"
#include "kernels/generator_gpu.hpp"
#include "kernels/projection_any.cuh"
#include "kernels/tconv_any.cuh"
#include "kernels/tconv_output_any.cuh"

namespace facegen {
namespace {

using gpu::Math;

template <Math M>
void configure_math() {
  gpu::configure_tconv_any_all<M>();
  constexpr Math O = M == Math::Bf16 ? Math::Bf16 : Math::Fp32;  // tf32 and Tf32x3 activations are floats
  gpu::configure_tconv_output_any<O, 4, 1>();
  gpu::configure_tconv_output_any<O, 4, 3>();
  gpu::configure_tconv_output_any<O, 5, 1>();
  gpu::configure_tconv_output_any<O, 5, 3>();
}

// O: the activations' storage (Fp32 for fp32 and tf32, Bf16).
template <Math O>
void launch_output(const ModelSpec& s, const void* in, int n, const float* w, const float* b, float* images,
                   cudaStream_t stream) {
  const int last = s.stages() - 1, h = ModelSpec::stage_size(last), c_in = s.stage_channels(last);
  if (s.kernel_size == 4 && s.image_channels == 1) gpu::launch_tconv_output_any<O, 4, 1>(in, n, h, c_in, w, b, images, stream);
  else if (s.kernel_size == 4) gpu::launch_tconv_output_any<O, 4, 3>(in, n, h, c_in, w, b, images, stream);
  else if (s.image_channels == 1) gpu::launch_tconv_output_any<O, 5, 1>(in, n, h, c_in, w, b, images, stream);
  else gpu::launch_tconv_output_any<O, 5, 3>(in, n, h, c_in, w, b, images, stream);
}

}  // namespace

void DeviceNetwork::configure_any_shape_kernels(gpu::Math math) {
  gpu::with_math(math, [](auto m) { configure_math<decltype(m)::value>(); });
}

void DeviceNetwork::projection_any(const float* z, int n, void* act0, cudaStream_t stream) const {
  const int nz = spec_.latent_dim, k_out = spec_.proj_outputs();
  const float *w = proj_weight_, *sc = proj_scale_, *sh = proj_shift_;
  gpu::with_ffma_math(math_, [&](auto m) {  // FFMA for fp32 on tensor cores too
    gpu::launch_projection_any<decltype(m)::value>(z, n, nz, nz_pad_, k_out, w, sc, sh, act0, stream);
  });
}

void DeviceNetwork::tconv_any(int stage, const void* in, int n, void* out, cudaStream_t stream) const {
  const int h = ModelSpec::stage_size(stage), c_in = spec_.stage_channels(stage), c_out = spec_.stage_channels(stage + 1);
  const void* w = tconv_weight_[stage];
  const float *sc = tconv_scale_[stage], *sh = tconv_shift_[stage];
  gpu::with_math(math_, [&](auto m) {
    gpu::launch_tconv_any<decltype(m)::value>(in, n, h, c_in, c_out, ksize_, w, sc, sh, out, stream);
  });
}

void DeviceNetwork::output_layer_any(const void* act_last, int n, float* images, cudaStream_t stream) const {
  if (precision_ == Precision::Bf16) launch_output<Math::Bf16>(spec_, act_last, n, out_weight_, out_bias_, images, stream);
  else launch_output<Math::Fp32>(spec_, act_last, n, out_weight_, out_bias_, images, stream);
}

}  // namespace facegen
