// layers_cpu.hpp: the CPU reference of every layer of the generator.
//
// Plain loops of the formulas in generator/network.hpp, multithreaded with std::thread (`threads`
// <= 0: every hardware thread). These are the ground truth for the GPU kernels and the CPU backend
// of the program. Every function works for any sizes (tests use odd ones), and every output element
// is computed by the same operations in the same order whatever the batch size, the batch split or
// the thread count, so results are bit-identical across them (MPI runs rely on this).
#pragma once

#include <cstdint>

namespace facegen {

// out (n, k_out) = z (n, k_in) · weight (k_in, k_out) + bias (k_out)
void projection_cpu(const float* z, int64_t n, int k_in, int k_out, const float* weight,
                    const float* bias, float* out, int threads);

// Inference batch norm then ReLU, per channel c:
// out(p, c) = max(0, (in(p, c) - mean[c]) / sqrt(var[c] + 1e-5) * gamma[c] + beta[c])
// in, out: (pixels, channels), channels fastest; out may equal in.
void batchnorm_relu_cpu(const float* in, int64_t pixels, int channels, const float* beta,
                        const float* gamma, const float* mean, const float* var, float* out,
                        int threads);

// Stride-2 k x k transposed convolution, k = 5 (SAME padding, TensorFlow's conv2d_transpose) or
// k = 4 (PyTorch's ConvTranspose2d(k=4, stride=2, padding=1)):
// out(2i + kh - 1, 2j + kw - 1, o) += sum_c in(i, j, c) * weight[kh][kw][o][c], contributions
// outside the (2h, 2w) output dropped, then + bias[o].
// in (n, h, w, c_in); weight (k, k, c_out, c_in); bias (c_out); out (n, 2h, 2w, c_out), not
// overlapping in. Any other k is a std::invalid_argument.
void tconv_cpu(const float* in, int64_t n, int h, int w, int c_in, int k, const float* weight,
               const float* bias, int c_out, float* out, int threads);

// out[i] = tanh(in[i]); out may equal in.
void tanh_cpu(const float* in, int64_t count, float* out, int threads);

}  // namespace facegen
