// layers_cuda.hpp: the CUDA version of every layer, callable from plain C++.
//
// Same formulas, shapes and argument order as the CPU layers in layers_cpu.hpp, with device
// pointers and a stream in place of a thread count. Each launches asynchronously on `stream` and
// checks the launch (std::runtime_error on failure). Each output element uses the same summation
// order as its CPU twin and depends only on its own image, so results do not change with the
// batch size; the two agree to float rounding (FMA contraction, tanhf), not bit for bit.
#pragma once

#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace facegen {

// out (n, k_out) = z (n, k_in) · weight (k_in, k_out) + bias (k_out); weight k_out fastest.
void projection_cuda(const float* z, int64_t n, int k_in, int k_out, const float* weight,
                     const float* bias, float* out, cudaStream_t stream);

// out(p, c) = max(0, (in(p, c) - mean[c]) / sqrt(var[c] + 1e-5) * gamma[c] + beta[c]);
// in, out (pixels, channels), channels fastest; out may equal in.
void batchnorm_relu_cuda(const float* in, int64_t pixels, int channels, const float* beta,
                         const float* gamma, const float* mean, const float* var, float* out,
                         cudaStream_t stream);

// Stride-2 5x5 SAME transposed convolution, as tconv_cpu, except for the weight layout:
// in (n, h, w, c_in); weight_t (5, 5, c_in, c_out), c_out FASTEST (see tconv_weight_for_cuda);
// bias (c_out); out (n, 2h, 2w, c_out). out must not overlap in.
void tconv_cuda(const float* in, int64_t n, int h, int w, int c_in, const float* weight_t,
                const float* bias, int c_out, float* out, cudaStream_t stream);

// Host-side reordering of a file-layout weight (5, 5, c_out, c_in) into the layout tconv_cuda
// reads, (5, 5, c_in, c_out), so that neighbouring threads (neighbouring k) load neighbouring
// floats. weight_t holds 25 * c_in * c_out floats.
void tconv_weight_for_cuda(const float* weight, int c_in, int c_out, float* weight_t);

// out[i] = tanh(in[i]); out may equal in.
void tanh_cuda(const float* in, int64_t count, float* out, cudaStream_t stream);

}  // namespace facegen
