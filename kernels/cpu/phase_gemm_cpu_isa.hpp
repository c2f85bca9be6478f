// phase_gemm_cpu_isa.hpp: the micro-kernels behind phase_gemm_cpu, one set per instruction set.
//
// phase_gemm_cpu.cpp walks the layers and hands tiles of output rows to these kernels; each
// instruction set's kernels live in a file of their own (phase_gemm_cpu_avx512.cpp, ..._avx2.cpp,
// ..._sse2.cpp), compiled from the same template (phase_gemm_cpu_kernels.inl) for that vector
// width.
#pragma once

#include <cstdint>

namespace facegen {

// A tile: up to tile_rows output pixels (rows), each reading its input at src[r] + tap_offset[t]
// for taps t, c_in = depth values per tap.
struct PhaseTile {
  const float* const* src;     // (rows) pointers to each row's centre pixel in a padded map
  float* const* dst;           // (rows) where each row's first output goes
  int64_t dst_channel_stride;  // floats between a row's output channels (1 unless channel-planar)
  int rows;
  const int64_t* tap_offset;  // (taps) floats from a row's centre pixel to each tap's pixel
  int taps;
  int depth;  // c_in
  const float* weight;
  const float* bias;
};

// The last layer's tile: one phase's outputs (2i + py, 2j + px) for `rows` input rows i and every
// column j < width, read from a channel-planar padded map, (h + 2, depth, width + 2) per image.
struct PlanarTile {
  const float* src;        // the map at padded row i + 1, channel 0, column j = 0 (padded column 1)
  int64_t src_row_floats;  // floats between padded rows: depth * (width + 2)
  const int* dy;           // (taps) input row and column of each tap, relative to (i, j)
  const int* dx;
  int taps;
  int depth;            // c_in
  int width;            // w, a multiple of tanh_columns
  int rows;             // input rows i, i + 1, ..., at most the kernel's tanh_*_rows
  const float* weight;  // (taps, channels, depth)
  const float* bias;    // (channels)
  float* dst;           // the image's pixel (2i + py, px); column j's values at dst + 2j * channels
  int64_t dst_row_floats;  // floats between output rows 2i + py and 2(i + 1) + py
};

struct PhaseGemmKernels {
  int panel_width;  // output channels per panel
  int tile_rows;    // most rows of relu_tile
  // dst[r][k * dst_channel_stride], k < panel_width, = max(0, bias[0, panel_width) + sum_t,c
  // src[r][tap_offset[t] + c] * weight[(t * depth + c) * panel_width + k]), weight one panel (taps,
  // depth, panel_width).
  void (*relu_tile)(const PhaseTile& tile);
  void (*relu_tile_half)(const PhaseTile& tile);  // the same for a panel of panel_width / 2
  // output (i + r, j, k) = tanh(bias[k] + sum_t,c in(i + r + dy[t], c, j + dx[t]) *
  // weight[(t * channels + k) * depth + c]), for 1 (grey) and 3 (RGB) channels; at most
  // tanh_*_rows rows r, the width a multiple of tanh_columns.
  int tanh_columns;
  int tanh_grey_rows;
  void (*tanh_grey)(const PlanarTile& tile);
  int tanh_rgb_rows;
  void (*tanh_rgb)(const PlanarTile& tile);
};

const PhaseGemmKernels& avx512_phase_kernels();
const PhaseGemmKernels& avx2_phase_kernels();
const PhaseGemmKernels& sse2_phase_kernels();

}  // namespace facegen
