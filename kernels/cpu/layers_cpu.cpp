// layers_cpu.cpp: the CPU layers of the generator (see layers_cpu.hpp for the formulas and shapes).
//
// Every output element is computed by the same code path, with the same summation order, whatever
// the batch size, the thread count or the work split; threads only decide who computes an element.
// The CUDA kernels sum in orders of their own (kernels/phase_gemm.cuh gives fp32's: one FFMA chain
// per tap, then the taps' sums in tap order), so the two agree to rounding, not bit for bit (the GPU
// tests hold fp32 to 1e-5 of these layers).
#include "kernels/cpu/layers_cpu.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "common/model_shape.hpp"
#include "common/threads.hpp"

namespace facegen {

namespace {

constexpr int kProjBlock = 512;  // projection outputs per work item

// tconv: each output keeps kLanes partial sums, lane l taking the input channels c with
// c % kLanes == l, over all taps in (kh, kw) order; the lanes are then added as a fixed tree.
// kBlockK output channels are computed together so each input load serves several of them.
constexpr int kLanes = 8;
constexpr int kBlockK = 8;

inline float sum_lanes(const float (&acc)[kLanes]) {
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// Valid taps along one axis for output coordinate o (input extent `size`, kernel size k <= 5): tap
// t reads input (o + 1 - t) / 2 when that is a whole number inside [0, size). Returns how many,
// ascending t.
inline int taps_for_output(int o, int size, int k, int (&tap)[3], int (&src)[3]) {
  int count = 0;
  for (int t = (o + 1) % 2; t < k; t += 2) {
    const int i = (o + 1 - t) / 2;
    if (i >= 0 && i < size) {
      tap[count] = t;
      src[count] = i;
      ++count;
    }
  }
  return count;
}

// Eight floats handled as one value (one AVX register); GCC and Clang lower it to whatever the
// target has. Lane l of a partial sum always holds the channels c with c % kLanes == l.
typedef float Lanes __attribute__((vector_size(kLanes * sizeof(float))));

// Unaligned loads and stores; by reference, so no vector crosses a call boundary (the ABI for
// passing one depends on -march).
inline void load_lanes(Lanes& v, const float* p) { std::memcpy(&v, p, sizeof v); }
inline void store_lanes(float* p, const Lanes& v) { std::memcpy(p, &v, sizeof v); }

// The last partial group of channels [c, c_in), zero-padded to a whole one: the padding adds exact
// zeros, so lane l still receives channel c + l only.
inline void load_tail(Lanes& v, const float* p, int count) {
  float padded[kLanes] = {};
  for (int l = 0; l < count; ++l) padded[l] = p[l];
  load_lanes(v, padded);
}

// Adds one tap's contribution to PX output pixels of one row, output channels [k0, k0 + KB):
// acc[p] (KB, kLanes) += in pixel x[p] (c_in) against the tap's weight rows wt (KB, c_in).
// Each (pixel, channel, lane) chain sees the same operations in the same order whatever PX is.
template <int KB, int PX>
inline void tconv_tap(const float* const (&x)[PX], const float* wt, int c_in,
                      float* const (&acc)[PX]) {
  Lanes sum[PX][KB];
  for (int p = 0; p < PX; ++p)
    for (int kk = 0; kk < KB; ++kk) load_lanes(sum[p][kk], acc[p] + kk * kLanes);
  const int c_main = c_in - c_in % kLanes;
  for (int c = 0; c < c_main; c += kLanes) {
    Lanes xv[PX];
    for (int p = 0; p < PX; ++p) load_lanes(xv[p], x[p] + c);
    for (int kk = 0; kk < KB; ++kk) {
      Lanes wv;
      load_lanes(wv, wt + int64_t(kk) * c_in + c);
      for (int p = 0; p < PX; ++p) sum[p][kk] += xv[p] * wv;
    }
  }
  if (c_main < c_in) {
    const int rest = c_in - c_main;
    Lanes xv[PX];
    for (int p = 0; p < PX; ++p) load_tail(xv[p], x[p] + c_main, rest);
    for (int kk = 0; kk < KB; ++kk) {
      Lanes wv;
      load_tail(wv, wt + int64_t(kk) * c_in + c_main, rest);
      for (int p = 0; p < PX; ++p) sum[p][kk] += xv[p] * wv;
    }
  }
  for (int p = 0; p < PX; ++p)
    for (int kk = 0; kk < KB; ++kk) store_lanes(acc[p] + kk * kLanes, sum[p][kk]);
}

// One output row `oy` of one image, output channels [k0, k0 + KB). Taps run outermost so one
// tap's weight rows stay in L1 while they serve every pixel of the row that uses them; pixels
// are taken PX at a time so each weight load feeds several accumulators.
// in_img (h, w, c_in); weight (k, k, c_out, c_in); out_img (2h, 2w, c_out);
// scratch (2w, KB, kLanes) partial sums.
template <int KB>
void tconv_row_block(const float* in_img, int h, int w, int c_in, int k, const float* weight,
                     const float* bias, int c_out, int k0, int oy, float* out_img,
                     float* scratch) {
  constexpr int PX = KB >= 6 ? 2 : 4;
  const int64_t per_pixel = int64_t(KB) * kLanes;
  std::fill(scratch, scratch + 2 * w * per_pixel, 0.0f);
  int tap_y[3], src_y[3];
  const int ny = taps_for_output(oy, h, k, tap_y, src_y);
  for (int a = 0; a < ny; ++a) {
    const float* in_row = in_img + int64_t(src_y[a]) * w * c_in;  // (w, c_in)
    for (int kw = 0; kw < k; ++kw) {
      const float* wt = weight + ((int64_t(tap_y[a]) * k + kw) * c_out + k0) * c_in;
      // Output column ox = 2j + kw - 1 for input column j; keep those inside [0, 2w).
      const int j_first = kw == 0 ? 1 : 0;
      const int j_end = std::min(w, (2 * w - kw) / 2 + 1);
      int j = j_first;
      for (; j + PX <= j_end; j += PX) {
        const float* x[PX];
        float* acc[PX];
        for (int p = 0; p < PX; ++p) {
          x[p] = in_row + int64_t(j + p) * c_in;
          acc[p] = scratch + (2 * (j + p) + kw - 1) * per_pixel;
        }
        tconv_tap<KB, PX>(x, wt, c_in, acc);
      }
      for (; j < j_end; ++j) {
        const float* x[1] = {in_row + int64_t(j) * c_in};
        float* acc[1] = {scratch + (2 * j + kw - 1) * per_pixel};
        tconv_tap<KB, 1>(x, wt, c_in, acc);
      }
    }
  }
  float* y = out_img + int64_t(oy) * 2 * w * c_out + k0;  // (2w, c_out)
  for (int ox = 0; ox < 2 * w; ++ox)
    for (int kk = 0; kk < KB; ++kk) {
      float lanes[kLanes];
      for (int l = 0; l < kLanes; ++l) lanes[l] = scratch[ox * per_pixel + kk * kLanes + l];
      y[int64_t(ox) * c_out + kk] = sum_lanes(lanes) + bias[k0 + kk];
    }
}

// Dispatches a channel block of kb <= KB channels to the instance compiled for exactly kb.
template <int KB>
void tconv_row(int kb, const float* in_img, int h, int w, int c_in, int k, const float* weight,
               const float* bias, int c_out, int k0, int oy, float* out_img, float* scratch) {
  if constexpr (KB > 1) {
    if (kb < KB) {
      tconv_row<KB - 1>(kb, in_img, h, w, c_in, k, weight, bias, c_out, k0, oy, out_img,
                        scratch);
      return;
    }
  }
  tconv_row_block<KB>(in_img, h, w, c_in, k, weight, bias, c_out, k0, oy, out_img, scratch);
}

}  // namespace

void projection_cpu(const float* z, int64_t n, int k_in, int k_out, const float* weight,
                    const float* bias, float* out, int threads) {
  // z (n, k_in); weight (k_in, k_out), k_out fastest; out (n, k_out).
  const int64_t blocks = (k_out + kProjBlock - 1) / kProjBlock;
  parallel_for(n * blocks, threads, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t image = item / blocks;
      const int o0 = static_cast<int>(item % blocks) * kProjBlock;
      const int o1 = std::min(k_out, o0 + kProjBlock);
      const float* zi = z + image * k_in;
      float* y = out + image * k_out;
      for (int o = o0; o < o1; ++o) y[o] = 0.0f;
      for (int i = 0; i < k_in; ++i) {
        const float zv = zi[i];
        const float* wrow = weight + int64_t(i) * k_out;
        for (int o = o0; o < o1; ++o) y[o] += zv * wrow[o];
      }
      for (int o = o0; o < o1; ++o) y[o] += bias[o];
    }
  });
}

void batchnorm_relu_cpu(const float* in, int64_t pixels, int channels, const float* beta,
                        const float* gamma, const float* mean, const float* var, float* out,
                        int threads) {
  // in, out (pixels, channels), channels fastest.
  std::vector<float> scale(channels);  // gamma / sqrt(var + eps), computed once per channel
  for (int c = 0; c < channels; ++c) scale[c] = gamma[c] / std::sqrt(var[c] + kBatchNormEps);
  const float* s = scale.data();
  parallel_for(pixels, threads, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const float* x = in + p * channels;
      float* y = out + p * channels;
      for (int c = 0; c < channels; ++c) {
        const float v = (x[c] - mean[c]) * s[c] + beta[c];
        y[c] = v > 0.0f ? v : 0.0f;
      }
    }
  });
}

void tconv_cpu(const float* in, int64_t n, int h, int w, int c_in, int k, const float* weight,
               const float* bias, int c_out, float* out, int threads) {
  // in (n, h, w, c_in); weight (k, k, c_out, c_in); out (n, 2h, 2w, c_out).
  if (k != 4 && k != 5) throw std::invalid_argument("tconv_cpu: kernel size must be 4 or 5");
  // Work items run channel block outermost, so a thread keeps one block's weights in cache while
  // it walks over images and rows.
  const int64_t k_blocks = (c_out + kBlockK - 1) / kBlockK;
  const int64_t rows = 2 * int64_t(h);
  const int64_t in_image = int64_t(h) * w * c_in;
  const int64_t out_image = 4 * int64_t(h) * w * c_out;
  parallel_for(k_blocks * n * rows, threads, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(2 * int64_t(w) * kBlockK * kLanes);
    for (int64_t item = begin; item < end; ++item) {
      const int oy = static_cast<int>(item % rows);
      const int64_t image = (item / rows) % n;
      const int k0 = static_cast<int>(item / (rows * n)) * kBlockK;
      const int kb = std::min(kBlockK, c_out - k0);
      tconv_row<kBlockK>(kb, in + image * in_image, h, w, c_in, k, weight, bias, c_out, k0, oy,
                         out + image * out_image, scratch.data());
    }
  });
}

void tanh_cpu(const float* in, int64_t count, float* out, int threads) {
  parallel_for(count, threads, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = std::tanh(in[i]);
  });
}

}  // namespace facegen
