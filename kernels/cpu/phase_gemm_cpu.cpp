// phase_gemm_cpu.cpp: the fast CPU layers (see phase_gemm_cpu.hpp): instruction-set choice, weight
// folding and packing, and the walk over phases, panels and tiles of rows that feeds the kernels.
#include "kernels/cpu/phase_gemm_cpu.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cpu/phase_gemm_cpu_isa.hpp"

namespace facegen {

namespace {

const PhaseGemmKernels& kernels_for(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Avx512:
      return avx512_phase_kernels();
    case CpuIsa::Avx2:
      return avx2_phase_kernels();
    case CpuIsa::Sse2:
      break;
  }
  return sse2_phase_kernels();
}

// One output phase (py, px) of a stride-2 k x k transposed convolution: output (2i + py, 2j + px)
// takes tap (kh, kw) from input (i + dy, j + dx) for the taps of matching parity, (kh, kw)
// ascending: for k = 5, 3 or 2 rows of taps times 3 or 2 columns; for k = 4, 2 x 2 in every
// phase. dy and dx lie in [-1, 1], inside the maps' one-pixel zero border.
struct Phase {
  int taps = 0;
  int kh[9], kw[9], dy[9], dx[9];
};

Phase make_phase(int py, int px, int k) {
  Phase phase;
  for (int kh = (py + 1) % 2; kh < k; kh += 2)
    for (int kw = (px + 1) % 2; kw < k; kw += 2) {
      phase.kh[phase.taps] = kh;
      phase.kw[phase.taps] = kw;
      phase.dy[phase.taps] = (py + 1 - kh) / 2;  // out = 2 * in + kh - 1
      phase.dx[phase.taps] = (px + 1 - kw) / 2;
      ++phase.taps;
    }
  return phase;
}

// Batch norm as out = x * scale + shift, per channel, in double.
void batchnorm_affine(const BatchNormView& bn, int c, double* scale, double* shift) {
  *scale = double(bn.gamma[c]) / std::sqrt(double(bn.var[c]) + double(kBatchNormEps));
  *shift = double(bn.beta[c]) - double(bn.mean[c]) * *scale;
}

// The layer's kernels, checking that its channels fit them: whole panels, then at most one half
// panel (every width of the family is a multiple of 16); 1 or 3 image channels.
const PhaseGemmKernels& checked_kernels(const PackedLayer& layer, bool last) {
  const PhaseGemmKernels& k = kernels_for(layer.isa);
  const int rest = layer.c_out % k.panel_width;
  const bool fits = last ? layer.size_in % k.tanh_columns == 0 &&
                               (layer.c_out == 1 || layer.c_out == 3)
                         : layer.c_out > 0 && (rest == 0 || rest == k.panel_width / 2);
  if (!fits)
    throw std::logic_error("phase_gemm_cpu: " + std::to_string(layer.c_in) + " -> " +
                           std::to_string(layer.c_out) + " channels do not fit the " +
                           cpu_isa_name(layer.isa) + " kernels");
  return k;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

PackedLayer pack_projection(const float* weight, const float* bias, int k_in,
                            const BatchNormView& bn, CpuIsa isa) {
  const int width = kernels_for(isa).panel_width;
  const int k_out = 16 * bn.channels;  // (4, 4, channels)
  PackedLayer layer;
  layer.isa = isa;
  layer.c_in = k_in;
  layer.c_out = k_out;
  layer.weight.resize(int64_t(k_in) * k_out);  // panels (k_in, panel width), one after another
  layer.bias.resize(k_out);
  for (int o = 0; o < k_out; ++o) {
    double scale, shift;
    batchnorm_affine(bn, o % bn.channels, &scale, &shift);
    layer.bias[o] = float(bias[o] * scale + shift);
    const int k0 = o / width * width, panel_width = std::min(width, k_out - k0);
    float* panel = layer.weight.data() + int64_t(k0) * k_in + (o - k0);
    for (int i = 0; i < k_in; ++i)
      panel[int64_t(i) * panel_width] = float(weight[int64_t(i) * k_out + o] * scale);
  }
  return layer;
}

PackedLayer pack_tconv(const TConvView& tc, const BatchNormView* next_bn, CpuIsa isa) {
  if (tc.kernel_size != 4 && tc.kernel_size != 5)
    throw std::logic_error("phase_gemm_cpu: kernel size " + std::to_string(tc.kernel_size) +
                           " is neither 4 nor 5");
  // The last layer's vectors run along its input columns: a map narrower than a step of this
  // instruction set's kernel (16 columns against AVX-512's 32, for 32x32 images) takes the next
  // narrower one, whose results differ by rounding only.
  while (!next_bn && isa != CpuIsa::Sse2 && tc.size_in % kernels_for(isa).tanh_columns != 0)
    isa = static_cast<CpuIsa>(static_cast<int>(isa) - 1);
  PackedLayer layer;
  layer.isa = isa;
  layer.c_in = tc.c_in;
  layer.c_out = tc.c_out;
  layer.size_in = tc.size_in;
  layer.kernel_size = tc.kernel_size;
  const int taps = tc.kernel_size;
  layer.weight.resize(int64_t(taps) * taps * tc.c_out * tc.c_in);
  layer.bias.resize(tc.c_out);
  std::vector<double> scale(tc.c_out, 1.0), shift(tc.c_out, 0.0);
  for (int k = 0; k < tc.c_out; ++k) {
    if (next_bn) batchnorm_affine(*next_bn, k, &scale[k], &shift[k]);
    layer.bias[k] = float(tc.bias[k] * scale[k] + shift[k]);
  }
  const int width = kernels_for(isa).panel_width;
  float* out = layer.weight.data();
  for (int q = 0; q < 4; ++q) {  // phases in (py, px) order, each packed after the one before
    const Phase phase = make_phase(q / 2, q % 2, taps);
    auto tap_row = [&](int t, int k) {  // (c_in) weights of tap t, output channel k
      return tc.weight + ((int64_t(phase.kh[t]) * taps + phase.kw[t]) * tc.c_out + k) * tc.c_in;
    };
    if (!next_bn) {  // last layer: (taps, c_out, c_in), no batch norm after it
      for (int t = 0; t < phase.taps; ++t)
        for (int k = 0; k < tc.c_out; ++k) out = std::copy_n(tap_row(t, k), tc.c_in, out);
      continue;
    }
    for (int k0 = 0; k0 < tc.c_out; k0 += width)  // panels (taps, c_in, panel width)
      for (int t = 0; t < phase.taps; ++t)
        for (int c = 0; c < tc.c_in; ++c)
          for (int k = k0; k < std::min(k0 + width, tc.c_out); ++k)
            *out++ = float(tap_row(t, k)[c] * scale[k]);
  }
  return layer;
}

namespace {

// The kernel for the panel of output channels starting at k0: a whole one, or the last half one.
void relu_panel(const PhaseGemmKernels& k, const PackedLayer& layer, int k0,
                const PhaseTile& tile) {
  (layer.c_out - k0 >= k.panel_width ? k.relu_tile : k.relu_tile_half)(tile);
}

}  // namespace

void projection_relu_fast(const PackedLayer& layer, const float* z, int64_t n, float* out,
                          ThreadShare& pool) {
  const PhaseGemmKernels& k = checked_kernels(layer, false);
  const int size = 4, channels = layer.c_out / 16;
  const int64_t panels = ceil_div(layer.c_out, k.panel_width);
  const int64_t tiles = ceil_div(n, k.tile_rows);
  const int64_t zero_offset = 0;
  pool.parallel_for(panels * tiles, [&](int64_t begin, int64_t end) {
    const float* src[16];
    float* dst[16];
    for (int64_t item = begin; item < end; ++item) {
      const int64_t panel = item / tiles, first = item % tiles * k.tile_rows;
      const int rows = int(std::min<int64_t>(k.tile_rows, n - first));
      const int o = int(panel * k.panel_width), pixel = o / channels;
      const int64_t at =
          ((pixel / size + 1) * (size + 2) + pixel % size + 1) * channels + o % channels;
      for (int r = 0; r < rows; ++r) {
        src[r] = z + (first + r) * layer.c_in;
        dst[r] = out + (first + r) * padded_floats(size, channels) + at;
      }
      relu_panel(k, layer, o,
                 {src, dst, 1, rows, &zero_offset, 1, layer.c_in,
                  layer.weight.data() + int64_t(o) * layer.c_in, layer.bias.data() + o});
    }
  });
}

namespace {

// The walk shared by both transposed-convolution layers: items (phase, column block, tile of
// rows), rows running over (image, i, j) of the input. `run(tile, phase, column block)` fills
// the tile's weight and bias and calls a kernel; dst_at(image, oy, ox) is the output pixel.
template <class Run, class DstAt>
void for_each_tile(const PackedLayer& layer, int tile_rows, int64_t blocks, const float* in,
                   int64_t n, Run run, DstAt dst_at, ThreadShare& pool) {
  const int h = layer.size_in;
  const int64_t rows_total = n * h * h;
  const int64_t tiles = ceil_div(rows_total, tile_rows);
  Phase phases[4];
  int64_t offsets[4][9];
  for (int q = 0; q < 4; ++q) {
    phases[q] = make_phase(q / 2, q % 2, layer.kernel_size);
    for (int t = 0; t < phases[q].taps; ++t)
      offsets[q][t] = (int64_t(phases[q].dy[t]) * (h + 2) + phases[q].dx[t]) * layer.c_in;
  }
  pool.parallel_for(4 * blocks * tiles, [&](int64_t begin, int64_t end) {
    const float* src[16];
    float* dst[16];
    for (int64_t item = begin; item < end; ++item) {
      const int q = int(item / (blocks * tiles));
      const int64_t block = item / tiles % blocks, first = item % tiles * tile_rows;
      const int rows = int(std::min<int64_t>(tile_rows, rows_total - first));
      // Row m = first + r is input pixel (i, j) of `image`, stepped along without divisions
      // (with 128 input channels, dividing for every row cost several percent of the layer).
      int64_t image = first / (h * h);
      int i = int(first / h % h), j = int(first % h);
      for (int r = 0; r < rows; ++r) {
        src[r] =
            in + image * padded_floats(h, layer.c_in) + ((i + 1) * (h + 2) + j + 1) * layer.c_in;
        dst[r] = dst_at(image, 2 * i + q / 2, 2 * j + q % 2);
        if (++j == h) {
          j = 0;
          if (++i == h) {
            i = 0;
            ++image;
          }
        }
      }
      run(PhaseTile{src, dst, 1, rows, offsets[q], phases[q].taps, layer.c_in, nullptr, nullptr}, q,
          block);
    }
  });
}

// Floats of the packed weights before phase q, phases in (py, px) order.
int64_t phase_start(const PackedLayer& layer, int q) {
  int taps = 0;
  for (int p = 0; p < q; ++p) taps += make_phase(p / 2, p % 2, layer.kernel_size).taps;
  return int64_t(taps) * layer.c_in * layer.c_out;
}

}  // namespace

void tconv_relu_fast(const PackedLayer& layer, const float* in, int64_t n, float* out,
                     bool planar_out, ThreadShare& pool) {
  const PhaseGemmKernels& k = checked_kernels(layer, false);
  const int out_size = 2 * layer.size_in;
  const int64_t out_image = padded_floats(out_size, layer.c_out);
  const int64_t row_floats = int64_t(out_size + 2) * layer.c_out;  // one padded output row
  const int64_t channel_stride = planar_out ? out_size + 2 : 1;
  int64_t starts[4];
  for (int q = 0; q < 4; ++q) starts[q] = phase_start(layer, q);
  auto dst_at = [&](int64_t image, int oy, int ox) {
    return out + image * out_image + (oy + 1) * row_floats +
           (ox + 1) * (planar_out ? 1 : int64_t(layer.c_out));
  };
  auto run = [&](PhaseTile tile, int q, int64_t block) {
    const int k0 = int(block * k.panel_width);
    float* dst[16];
    for (int r = 0; r < tile.rows; ++r) dst[r] = tile.dst[r] + k0 * channel_stride;
    tile.dst = dst;
    tile.dst_channel_stride = channel_stride;
    tile.weight = layer.weight.data() + starts[q] + int64_t(k0) * tile.taps * layer.c_in;
    tile.bias = layer.bias.data() + k0;
    relu_panel(k, layer, k0, tile);
  };
  for_each_tile(layer, k.tile_rows, ceil_div(layer.c_out, k.panel_width), in, n, run, dst_at,
                pool);
}

void tconv_tanh_fast(const PackedLayer& layer, const float* in, int64_t n, float* images,
                     ThreadShare& pool) {
  const PhaseGemmKernels& k = checked_kernels(layer, true);
  const bool grey = layer.c_out == 1;
  const int rows = grey ? k.tanh_grey_rows : k.tanh_rgb_rows;
  const int h = layer.size_in, out_size = 2 * h, channels = layer.c_out;
  Phase phases[4];
  int64_t starts[4];
  for (int q = 0; q < 4; ++q) {
    phases[q] = make_phase(q / 2, q % 2, layer.kernel_size);
    starts[q] = phase_start(layer, q);
  }
  const int64_t row_floats = int64_t(h + 2) * layer.c_in;  // one padded planar input row
  const int64_t row_blocks = ceil_div(h, rows);
  // Items (image, block of input rows, phase).
  pool.parallel_for(n * row_blocks * 4, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int q = int(item % 4), i = int(item / 4 % row_blocks) * rows;
      const int64_t image = item / (4 * row_blocks);
      const Phase& phase = phases[q];
      const PlanarTile tile{
          in + image * padded_floats(h, layer.c_in) + (i + 1) * row_floats + 1,
          row_floats,
          phase.dy,
          phase.dx,
          phase.taps,
          layer.c_in,
          h,
          std::min(rows, h - i),
          layer.weight.data() + starts[q],
          layer.bias.data(),
          images + ((image * out_size + 2 * i + q / 2) * out_size + q % 2) * int64_t(channels),
          2 * int64_t(out_size) * channels};
      (grey ? k.tanh_grey : k.tanh_rgb)(tile);
    }
  });
}

}  // namespace facegen
