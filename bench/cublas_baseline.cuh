// cublas_baseline.cuh: the generator through cuBLAS, the benchmark's yardstick ("kernel 0").
//
// Each transposed convolution is the classic GEMM + col2im: cols (pixels, 25 * c_out) = act (pixels,
// c_in) · W^T with W in its file layout (25 * c_out, c_in), then a gather kernel sums each output's
// taps and applies bias, the next batch norm and ReLU (tanh after the last). cuBLAS picks its own
// kernels and may split K depending on the sizes, so this path's bits may depend on the batch size:
// it is a baseline, never shipped. Columns are computed in chunks of at most kChunk images.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "generator/backend.hpp"
#include "generator/network.hpp"
#include "common/cuda_check.cuh"
#include "tests/gpu/reference.hpp"

namespace facegen {

#define CUBLAS_CHECK(call)                                                                      \
  do {                                                                                          \
    cublasStatus_t st_ = (call);                                                                \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                           \
      throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " + \
                               #call + ": cuBLAS status " + std::to_string(static_cast<int>(st_))); \
  } while (0)

template <typename Act>
__global__ void baseline_scale_shift_relu(const float* in, int64_t count, int positions, const float* scale,
                                          const float* shift, Act* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    int j = static_cast<int>(i % positions);
    out[i] = static_cast<Act>(fmaxf(fmaf(in[i], scale[j], shift[j]), 0.f));
  }
}

// cols (n, h, h, 25, c_out) -> out (n, 2h, 2h, c_out): sum of taps, then relu(scale*x + shift) or
// tanh(x + shift) when last.
template <typename Act, typename Out>
__global__ void baseline_col2im(const float* cols, int n, int h, int c_out, const float* scale,
                                const float* shift, bool last, Out* out) {
  const int ho = 2 * h;
  const int64_t count = int64_t{n} * ho * ho * c_out;
  for (int64_t q = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; q < count; q += int64_t{gridDim.x} * blockDim.x) {
    int k = static_cast<int>(q % c_out);
    int64_t p = q / c_out;
    int x = static_cast<int>(p % ho), y = static_cast<int>((p / ho) % ho);
    int img = static_cast<int>(p / (int64_t{ho} * ho));
    float s = 0.f;
    for (int kh = 0; kh < 5; ++kh) {
      int ty = y + 1 - kh;
      if (ty < 0 || (ty & 1) || ty / 2 >= h) continue;
      for (int kw = 0; kw < 5; ++kw) {
        int tx = x + 1 - kw;
        if (tx < 0 || (tx & 1) || tx / 2 >= h) continue;
        s += cols[((int64_t{img} * h + ty / 2) * h + tx / 2) * 25 * c_out + (kh * 5 + kw) * c_out + k];
      }
    }
    out[q] = last ? static_cast<Out>(tanhf(s + shift[k])) : static_cast<Out>(fmaxf(fmaf(s, scale[k], shift[k]), 0.f));
  }
}

class CublasGenerator {
 public:
  static constexpr int kChunk = 1024;

  CublasGenerator(const std::vector<float>& net, Precision p, int max_batch) : p_(p), max_batch_(max_batch) {
    CUBLAS_CHECK(cublasCreate(&handle_));
    const reference::Offsets o;
    wp_ = upload(std::vector<float>(net.begin() + o.proj_weight, net.begin() + o.proj_weight + kLatentDim * kProjOutputs));
    std::vector<float> sc, sh;
    fold(net, o.bn[0], kStageChannels[0], o.proj_bias, kProjOutputs, &sc, &sh);
    scale_[0] = upload(sc);
    shift_[0] = upload(sh);
    for (int s = 0; s < 4; ++s) {
      const int c_in = kStageChannels[s], c_out = kStageChannels[s + 1];
      std::vector<float> w(net.begin() + o.tconv_weight[s], net.begin() + o.tconv_weight[s] + 25 * c_out * c_in);
      if (p == Precision::Bf16) {
        std::vector<__nv_bfloat16> wb(w.size());
        for (size_t i = 0; i < w.size(); ++i) wb[i] = __float2bfloat16_rn(w[i]);
        w_[s] = upload(wb);
      } else {
        w_[s] = upload(w);
      }
      if (s < 3) {
        fold(net, o.bn[s + 1], c_out, o.tconv_bias[s], c_out, &sc, &sh);
      } else {
        sc.assign(3, 1.f);
        sh.assign(net.begin() + o.tconv_bias[3], net.begin() + o.tconv_bias[3] + 3);
      }
      scale_[s + 1] = upload(sc);
      shift_[s + 1] = upload(sh);
    }
    const size_t act_elem = p == Precision::Bf16 ? 2 : 4;
    CUDA_CHECK(cudaMalloc(&proj_out_, sizeof(float) * kProjOutputs * size_t(max_batch)));
    for (int s = 0; s < 4; ++s)
      CUDA_CHECK(cudaMalloc(&act_[s], act_elem * kStageSize[s] * kStageSize[s] * kStageChannels[s] * size_t(max_batch)));
    size_t cols = 0;
    for (int s = 0; s < 4; ++s) cols = std::max(cols, size_t(kStageSize[s]) * kStageSize[s] * 25 * kStageChannels[s + 1]);
    CUDA_CHECK(cudaMalloc(&cols_, sizeof(float) * cols * std::min(kChunk, max_batch)));
  }
  ~CublasGenerator() {
    cublasDestroy(handle_);
    cudaFree(wp_);
    cudaFree(proj_out_);
    cudaFree(cols_);
    for (int s = 0; s < 4; ++s) { cudaFree(w_[s]); cudaFree(act_[s]); }
    for (int s = 0; s < 5; ++s) { cudaFree(scale_[s]); cudaFree(shift_[s]); }
  }

  void forward(const float* z, int n, float* images, cudaStream_t stream) {
    CUBLAS_CHECK(cublasSetStream(handle_, stream));
    const float one = 1.f, zero = 0.f;
    // Projection in float32 for every precision, as the shipped path.
    CUBLAS_CHECK(cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, kProjOutputs, n, kLatentDim, &one, wp_, CUDA_R_32F,
                              kProjOutputs, z, CUDA_R_32F, kLatentDim, &zero, proj_out_, CUDA_R_32F, kProjOutputs,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    const int64_t count = int64_t{n} * kProjOutputs;
    if (p_ == Precision::Bf16)
      baseline_scale_shift_relu<<<1024, 256, 0, stream>>>(proj_out_, count, kProjOutputs, scale_[0], shift_[0],
                                                          static_cast<__nv_bfloat16*>(act_[0]));
    else
      baseline_scale_shift_relu<<<1024, 256, 0, stream>>>(proj_out_, count, kProjOutputs, scale_[0], shift_[0],
                                                          static_cast<float*>(act_[0]));
    CUDA_CHECK_LAUNCH();
    const cudaDataType_t t = p_ == Precision::Bf16 ? CUDA_R_16BF : CUDA_R_32F;
    const cublasComputeType_t ct = p_ == Precision::Tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const size_t act_elem = p_ == Precision::Bf16 ? 2 : 4;
    for (int s = 0; s < 4; ++s) {
      const int h = kStageSize[s], c_in = kStageChannels[s], c_out = kStageChannels[s + 1];
      for (int i0 = 0; i0 < n; i0 += kChunk) {
        const int nc = std::min(kChunk, n - i0);
        const char* in = static_cast<const char*>(act_[s]) + act_elem * size_t(i0) * h * h * c_in;
        CUBLAS_CHECK(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, 25 * c_out, nc * h * h, c_in, &one, w_[s], t, c_in,
                                  in, t, c_in, &zero, cols_, CUDA_R_32F, 25 * c_out, ct, CUBLAS_GEMM_DEFAULT));
        const size_t out_off = size_t(i0) * 4 * h * h * c_out;
        if (s == 3)
          baseline_col2im<float, float><<<2048, 256, 0, stream>>>(cols_, nc, h, c_out, scale_[4], shift_[4], true,
                                                                  images + out_off);
        else if (p_ == Precision::Bf16)
          baseline_col2im<__nv_bfloat16, __nv_bfloat16><<<2048, 256, 0, stream>>>(
              cols_, nc, h, c_out, scale_[s + 1], shift_[s + 1], false, static_cast<__nv_bfloat16*>(act_[s + 1]) + out_off);
        else
          baseline_col2im<float, float><<<2048, 256, 0, stream>>>(cols_, nc, h, c_out, scale_[s + 1], shift_[s + 1],
                                                                  false, static_cast<float*>(act_[s + 1]) + out_off);
        CUDA_CHECK_LAUNCH();
      }
    }
  }

 private:
  template <typename T>
  static T* upload(const std::vector<T>& v) {
    T* d;
    CUDA_CHECK(cudaMalloc(&d, v.size() * sizeof(T)));
    CUDA_CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
  }
  static void fold(const std::vector<float>& net, int64_t bn, int c, int64_t bias, int positions,
                   std::vector<float>* sc, std::vector<float>* sh) {
    sc->resize(positions);
    sh->resize(positions);
    for (int j = 0; j < positions; ++j) {
      int ch = j % c;
      double s = net[bn + c + ch] / std::sqrt(double(net[bn + 3 * c + ch]) + kBatchNormEps);
      (*sc)[j] = float(s);
      (*sh)[j] = float((double(net[bias + j]) - net[bn + 2 * c + ch]) * s + net[bn + ch]);
    }
  }

  Precision p_;
  int max_batch_;
  cublasHandle_t handle_ = nullptr;
  float* wp_ = nullptr;
  void* w_[4] = {};
  float* scale_[5] = {};
  float* shift_[5] = {};
  float* proj_out_ = nullptr;
  void* act_[4] = {};
  float* cols_ = nullptr;
};

}  // namespace facegen
