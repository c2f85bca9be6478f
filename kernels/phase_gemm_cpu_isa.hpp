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

// The last layer's tile: one phase's row of output pixels (2i + py, 2j + px), j < width, read from
// a channel-planar padded map, (h + 2, depth, width + 2) per image.
struct PlanarTile {
  const float* src;  // the map at padded row i + 1, channel 0, column j = 0 (padded column 1)
  const int* dy;     // (taps) input row and column of each tap, relative to (i, j)
  const int* dx;
  int taps;
  int depth;            // c_in
  int width;            // w, a multiple of tanh_columns
  const float* weight;  // (taps, 3, depth)
  const float* bias;    // (3)
  float* dst;           // the image's pixel (2i + py, px); column j's 3 values at dst + 6j
};

struct PhaseGemmKernels {
  int panel_width;   // output channels per panel
  int tile_rows;     // most rows of relu_tile
  int tanh_columns;  // tanh_row's width must be a multiple of this
  // dst[r][k * dst_channel_stride], k < panel_width, = max(0, bias[0, panel_width) + sum_t,c
  // src[r][tap_offset[t] + c] * weight[(t * depth + c) * panel_width + k]), weight one panel (taps,
  // depth, panel_width).
  void (*relu_tile)(const PhaseTile& tile);
  // output (j, k) = tanh(bias[k] + sum_t,c in(i + dy[t], c, j + dx[t]) * weight[(t * 3 + k) * depth
  // + c])
  void (*tanh_row)(const PlanarTile& tile);
};

const PhaseGemmKernels& avx512_phase_kernels();
const PhaseGemmKernels& avx2_phase_kernels();
const PhaseGemmKernels& sse2_phase_kernels();

}  // namespace facegen
