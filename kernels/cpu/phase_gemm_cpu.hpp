// phase_gemm_cpu.hpp: the fast CPU layers of the generator, batched over images, for any network
// of the family (common/model_spec.hpp).
//
// Each stride-2 k x k transposed convolution is split by output parity (py, px) into four ordinary
// convolutions: for k = 5 of 2x2, 2x3, 3x2 and 3x3 taps (4 + 6 + 6 + 9 = 25), for k = 4 of 2x2
// taps each (16), so no multiply ever falls on an inserted zero; and each phase runs as a GEMM: rows are output pixels of any image, columns output channels, the
// depth (taps x c_in) read straight from the input through one offset per tap. The batch norm that
// follows a layer is folded into its weights and bias, and ReLU (tanh after the last layer) is
// applied as the results leave the registers. Weights are packed once into panels of
// `panel_width` output channels, (c_out / panel_width, taps, c_in, panel_width), the last panel
// half as wide where c_out is an odd multiple of half a panel (channel widths are multiples of 16).
//
// Activations between layers are (n, h + 2, w + 2, c), C fastest, with a zero border of one pixel
// that the layers never write: a tap that falls outside the image reads zeros.
//
// Every output is one chain of multiply-adds over (tap, c_in) in a fixed order, then + bias: the
// batch size, the tiling and the pool's thread count decide only who computes it, so the bytes are the
// same for any of them. Each packed layer is made for one instruction set (AVX-512, AVX2 + FMA, or
// SSE2: common/cpu_isa.hpp picks the widest the CPU has); results differ between instruction sets
// by rounding only.
#pragma once

#include <cstdint>
#include <vector>

#include "common/cpu_isa.hpp"
#include "common/model_shape.hpp"
#include "common/threads.hpp"

namespace facegen {

// One layer's weights, folded and packed for one instruction set's kernels.
struct PackedLayer {
  CpuIsa isa = CpuIsa::Sse2;
  int c_in = 0;
  int c_out = 0;
  int size_in = 0;      // h = w of the input map (0 for the projection)
  int kernel_size = 0;  // k of a transposed convolution: 4 or 5 (0 for the projection)
  // The projection and the ReLU layers: panels; the last layer: (taps, c_out, c_in) per phase.
  std::vector<float> weight;
  std::vector<float> bias;  // (c_out), the batch norm folded in
};

// The projection with batch norm 0 folded in: weight (k_in, k_out), k_out = 4 * 4 * bn.channels
// read as (4, 4, bn.channels).
PackedLayer pack_projection(const float* weight, const float* bias, int k_in,
                            const BatchNormView& bn, CpuIsa isa);
// A transposed convolution with the batch norm after it folded in (next_bn), or the last one
// (next_bn == nullptr), whose c_out must be 1 or 3. A kernel size other than 4 or 5 is a
// std::logic_error (the model loader refuses such files).
PackedLayer pack_tconv(const TConvView& tc, const BatchNormView* next_bn, CpuIsa isa);

// Floats per image of a padded activation (h + 2, w + 2, c) (or channel-planar, (h + 2, c, w + 2)).
inline int64_t padded_floats(int size, int channels) {
  return int64_t(size + 2) * (size + 2) * channels;
}

// z (n, k_in) -> out (n, 6, 6, c) padded, c = k_out / 16: relu(bn0(z W + b)).
void projection_relu_fast(const PackedLayer& layer, const float* z, int64_t n, float* out,
                          ThreadShare& pool);
// in (n, h + 2, h + 2, c_in) padded -> out (n, 2h + 2, 2h + 2, c_out) padded: relu(bn(tconv(in))).
// planar_out: out is channel-planar instead, (n, 2h + 2, c_out, 2h + 2), the last layer's input.
void tconv_relu_fast(const PackedLayer& layer, const float* in, int64_t n, float* out,
                     bool planar_out, ThreadShare& pool);
// in (n, h + 2, c_in, h + 2) padded, channel-planar -> images (n, 2h, 2h, c_out), c_out 1 or 3:
// tanh(tconv(in)). Its vectors run along the output columns (3 channels are too few to vectorise
// over).
void tconv_tanh_fast(const PackedLayer& layer, const float* in, int64_t n, float* images,
                     ThreadShare& pool);

}  // namespace facegen
