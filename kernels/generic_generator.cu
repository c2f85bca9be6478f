// generic_generator.cu: the generic path's weights rearranged once, and the launches of its layers
// (kernels/projection_any.cuh, tconv_any.cuh, tconv_output_any.cuh).
#include "kernels/generic_generator.hpp"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "common/cuda_check.cuh"
#include "kernels/phase_weights.hpp"
#include "kernels/projection_any.cuh"
#include "kernels/tconv_any.cuh"
#include "kernels/tconv_output_any.cuh"
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

template <Math M>
void configure_all_any() {
  gpu::configure_tconv_any_all<M>();
  constexpr Math O = M == Math::Bf16 ? Math::Bf16 : Math::Fp32;  // tf32 activations are floats
  gpu::configure_tconv_output_any<O, 4, 1>();
  gpu::configure_tconv_output_any<O, 4, 3>();
  gpu::configure_tconv_output_any<O, 5, 1>();
  gpu::configure_tconv_output_any<O, 5, 3>();
}

template <Math M>
void launch_output_any(const ModelSpec& s, const void* in, int n, const float* w, const float* b, float* images,
                       cudaStream_t stream) {
  const int c_in = s.stage_channels(3);
  if (s.kernel_size == 4 && s.image_channels == 1) gpu::launch_tconv_output_any<M, 4, 1>(in, n, c_in, w, b, images, stream);
  else if (s.kernel_size == 4) gpu::launch_tconv_output_any<M, 4, 3>(in, n, c_in, w, b, images, stream);
  else if (s.image_channels == 1) gpu::launch_tconv_output_any<M, 5, 1>(in, n, c_in, w, b, images, stream);
  else gpu::launch_tconv_output_any<M, 5, 3>(in, n, c_in, w, b, images, stream);
}

}  // namespace

std::string generic_gpu_unsupported(const ModelSpec& s) {
  if (s.latent_dim < 1 || s.latent_dim > 1024) return "the latent size nz must be 1..1024, not " + std::to_string(s.latent_dim);
  if (s.base_channels < 16 || s.base_channels > gpu::kAnyOutMaxCin || s.base_channels % 16 != 0)
    return "the base channel count must be a multiple of 16 from 16 to 256, not " + std::to_string(s.base_channels);
  if (s.image_channels != 1 && s.image_channels != 3)
    return "the image must have 1 or 3 channels, not " + std::to_string(s.image_channels);
  if (s.kernel_size != 4 && s.kernel_size != 5) return "the kernel size must be 4 or 5, not " + std::to_string(s.kernel_size);
  return "";
}

GenericDeviceNetwork::GenericDeviceNetwork(const float* f, const ModelSpec& spec, Precision precision)
    : spec_(spec), precision_(precision) {
  const std::string why = generic_gpu_unsupported(spec);
  if (!why.empty()) throw std::invalid_argument("the CUDA path cannot run this network: " + why);
  const WeightOffsets L(spec);
  const int nz = spec.latent_dim, k_out = spec.proj_outputs(), k = spec.kernel_size;
  nz_pad_ = (nz + 3) / 4 * 4;
  std::vector<float> w(static_cast<size_t>(nz_pad_) * k_out, 0.f);
  std::copy(f + L.proj_weight, f + L.proj_weight + int64_t{nz} * k_out, w.begin());
  proj_weight_ = upload(w);
  std::vector<float> scale, shift;
  fold_batchnorm(f + L.bn[0], spec.stage_channels(0), f + L.proj_bias, k_out, &scale, &shift);
  proj_scale_ = upload(scale);
  proj_shift_ = upload(shift);
  for (int s = 0; s < 3; ++s) {
    const int c_in = spec.stage_channels(s), c_out = spec.stage_channels(s + 1);
    const float* tw = f + L.tconv_weight[s];
    if (precision == Precision::Bf16)
      tconv_weight_[s] = upload(phase_b_matrices<__nv_bfloat16>(tw, c_in, c_out, k, precision));
    else
      tconv_weight_[s] = upload(phase_b_matrices<float>(tw, c_in, c_out, k, precision));
    fold_batchnorm(f + L.bn[s + 1], c_out, f + L.tconv_bias[s], c_out, &scale, &shift);
    tconv_scale_[s] = upload(scale);
    tconv_shift_[s] = upload(shift);
  }
  const int64_t out_w = int64_t{k} * k * spec.stage_channels(4) * spec.stage_channels(3);
  out_weight_ = upload(std::vector<float>(f + L.tconv_weight[3], f + L.tconv_weight[3] + out_w));
  out_bias_ = upload(std::vector<float>(f + L.tconv_bias[3], f + L.tconv_bias[3] + spec.stage_channels(4)));
  switch (precision) {
    case Precision::Fp32: configure_all_any<Math::Fp32>(); break;
    case Precision::Tf32: configure_all_any<Math::Tf32>(); break;
    case Precision::Bf16: configure_all_any<Math::Bf16>(); break;
  }
}

GenericDeviceNetwork::~GenericDeviceNetwork() {
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
}

size_t GenericDeviceNetwork::activation_bytes_per_image(int stage) const {
  const size_t elem = precision_ == Precision::Bf16 ? 2 : 4;
  const size_t h = ModelSpec::stage_size(stage);
  return elem * h * h * spec_.stage_channels(stage);
}

void GenericDeviceNetwork::projection(const float* z, int n, void* act0, cudaStream_t stream) const {
  if (n <= 0) return;
  const int nz = spec_.latent_dim, k_out = spec_.proj_outputs();
  switch (precision_) {
    case Precision::Fp32: gpu::launch_projection_any<Math::Fp32>(z, n, nz, nz_pad_, k_out, proj_weight_, proj_scale_, proj_shift_, act0, stream); break;
    case Precision::Tf32: gpu::launch_projection_any<Math::Tf32>(z, n, nz, nz_pad_, k_out, proj_weight_, proj_scale_, proj_shift_, act0, stream); break;
    case Precision::Bf16: gpu::launch_projection_any<Math::Bf16>(z, n, nz, nz_pad_, k_out, proj_weight_, proj_scale_, proj_shift_, act0, stream); break;
  }
}

void GenericDeviceNetwork::tconv(int stage, const void* in, int n, void* out, cudaStream_t stream) const {
  if (stage < 0 || stage > 2) throw std::logic_error("tconv stage must be 0, 1 or 2");
  if (n <= 0) return;
  const int h = ModelSpec::stage_size(stage), c_in = spec_.stage_channels(stage), c_out = spec_.stage_channels(stage + 1);
  const int k = spec_.kernel_size;
  const void* w = tconv_weight_[stage];
  const float *sc = tconv_scale_[stage], *sh = tconv_shift_[stage];
  switch (precision_) {
    case Precision::Fp32: gpu::launch_tconv_any<Math::Fp32>(in, n, h, c_in, c_out, k, w, sc, sh, out, stream); break;
    case Precision::Tf32: gpu::launch_tconv_any<Math::Tf32>(in, n, h, c_in, c_out, k, w, sc, sh, out, stream); break;
    case Precision::Bf16: gpu::launch_tconv_any<Math::Bf16>(in, n, h, c_in, c_out, k, w, sc, sh, out, stream); break;
  }
}

void GenericDeviceNetwork::output_layer(const void* act3, int n, float* images, cudaStream_t stream) const {
  if (n <= 0) return;
  if (precision_ == Precision::Bf16) launch_output_any<Math::Bf16>(spec_, act3, n, out_weight_, out_bias_, images, stream);
  else launch_output_any<Math::Fp32>(spec_, act3, n, out_weight_, out_bias_, images, stream);
}

void GenericDeviceNetwork::forward(const float* z, int n, void* const act[4], float* images, cudaStream_t stream) const {
  projection(z, n, act[0], stream);
  for (int s = 0; s < 3; ++s) tconv(s, act[s], n, act[s + 1], stream);
  output_layer(act[3], n, images, stream);
}

}  // namespace facegen
