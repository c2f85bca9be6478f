// phase_gemm_cpu_kernels.inl: the micro-kernels of phase_gemm_cpu for one vector type V.
//
// Included, inside an anonymous namespace and a `#pragma GCC target` region, by each instruction
// set's file, after it defines V: V::Reg (V::kLanes floats), zero, load, broadcast, fma(a, b, c) =
// a * b + c, add, sub, mul, div, min, max, set1, relu, store, round (to the nearest integer) and
// times_pow2(p, k) = p * 2^k for whole k in [-126, 127]. Nothing here calls outside the region, so
// no code built for a wider instruction set leaks into code that runs on a narrower one.
//
// relu_tile: a register block of R rows x NV vectors (R x NV x kLanes outputs). Each step loads NV
// weight vectors once and multiplies them by R broadcast inputs, so one weight load feeds R
// multiply-adds. Every output accumulates (tap, c) in the same order whatever R is.

// acc (R, NV) += src rows x one panel, over all taps and depth.
template <class V, int R, int NV>
inline void phase_block(const PhaseTile& t, typename V::Reg (&acc)[R][NV]) {
  constexpr int kWidth = NV * V::kLanes;
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = V::zero();
  const float* w = t.weight;  // (taps, depth, kWidth)
  for (int tap = 0; tap < t.taps; ++tap) {
    const float* x[R];
    for (int r = 0; r < R; ++r) x[r] = t.src[r] + t.tap_offset[tap];
    for (int c = 0; c < t.depth; ++c, w += kWidth) {
      typename V::Reg wv[NV];
      for (int v = 0; v < NV; ++v) wv[v] = V::load(w + v * V::kLanes);
      for (int r = 0; r < R; ++r) {
        const typename V::Reg xv = V::broadcast(x[r] + c);
        for (int v = 0; v < NV; ++v) acc[r][v] = V::fma(xv, wv[v], acc[r][v]);
      }
    }
  }
}

template <class V, int R, int NV>
void relu_rows(const PhaseTile& t) {
  typename V::Reg acc[R][NV];
  phase_block<V, R, NV>(t, acc);
  for (int v = 0; v < NV; ++v) {
    const typename V::Reg b = V::load(t.bias + v * V::kLanes);
    for (int r = 0; r < R; ++r) {
      const typename V::Reg y = V::relu(V::add(acc[r][v], b));
      if (t.dst_channel_stride == 1) {
        V::store(t.dst[r] + v * V::kLanes, y);
      } else {  // a channel-planar map: the vector's channels lie dst_channel_stride apart
        float lane[V::kLanes];
        V::store(lane, y);
        for (int l = 0; l < V::kLanes; ++l)
          t.dst[r][(v * V::kLanes + l) * t.dst_channel_stride] = lane[l];
      }
    }
  }
}

// Calls the instance compiled for exactly t.rows rows (1..R).
template <class V, int R, int NV>
void relu_tile(const PhaseTile& t) {
  if constexpr (R > 1) {
    if (t.rows < R) return relu_tile<V, R - 1, NV>(t);
  }
  relu_rows<V, R, NV>(t);
}

// tanh(x) = 1 - 2 / (e^2x + 1), with e^2x = 2^t, t = 2x log2(e) = k + f, k whole, |f| <= 1/2,
// and 2^f = e^(f ln 2) by its Taylor series to degree 7 (relative error < 2e-7 at |f| = 1/2).
// |x| is capped at 9, where tanh is 1 to within 3e-8. The absolute error stays below 3e-7.
template <class V>
inline typename V::Reg tanh_vec(typename V::Reg x) {
  using Reg = typename V::Reg;
  x = V::min(V::max(x, V::set1(-9.0f)), V::set1(9.0f));
  const Reg t = V::mul(x, V::set1(2.0f * 1.44269504088896341f));
  const Reg k = V::round(t);
  const Reg g = V::mul(V::sub(t, k), V::set1(0.693147180559945309f));  // f ln 2
  constexpr float kTaylor[] = {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};
  Reg p = V::set1(1.0f / 5040);
  for (float c : kTaylor) p = V::fma(p, g, V::set1(c));
  const Reg e2x = V::times_pow2(p, k);
  return V::sub(V::set1(1.0f), V::div(V::set1(2.0f), V::add(e2x, V::set1(1.0f))));
}

// The last layer (1 or 3 output channels, K) reads a channel-planar map, (h + 2, c_in, w + 2) per
// image, so vectors run along output columns: one phase's outputs for R input rows, 2 x kLanes
// columns at a time, R x K x 2 accumulators; each weight broadcast serves 2R vectors and each
// input vector all K channels. Every output sums (tap, c) in the same order whatever R is.
template <class V, int K, int R>
void tanh_rows(const PlanarTile& t) {
  if constexpr (R > 1) {
    if (t.rows < R) return tanh_rows<V, K, R - 1>(t);
  }
  using Reg = typename V::Reg;
  constexpr int J = 2 * V::kLanes;
  const int64_t channel_floats = t.width + 2;  // one channel of one padded input row
  for (int j0 = 0; j0 < t.width; j0 += J) {
    Reg acc[R][K][2];
    for (int r = 0; r < R; ++r)
      for (int k = 0; k < K; ++k) acc[r][k][0] = acc[r][k][1] = V::zero();
    for (int tap = 0; tap < t.taps; ++tap) {
      const float* x = t.src + t.dy[tap] * t.src_row_floats + t.dx[tap] + j0;
      const float* w = t.weight + int64_t(tap) * K * t.depth;  // (K, depth)
      for (int c = 0; c < t.depth; ++c, x += channel_floats) {
        Reg wk[K];
        for (int k = 0; k < K; ++k) wk[k] = V::broadcast(w + k * t.depth + c);
        for (int r = 0; r < R; ++r) {
          Reg x0 = V::load(x + r * t.src_row_floats);
          Reg x1 = V::load(x + r * t.src_row_floats + V::kLanes);
          // Loaded once into registers for all K channels: left to itself GCC folds the load
          // into each multiply-add, K loads instead of one.
          asm("" : "+v"(x0), "+v"(x1));
          for (int k = 0; k < K; ++k) {
            acc[r][k][0] = V::fma(x0, wk[k], acc[r][k][0]);
            acc[r][k][1] = V::fma(x1, wk[k], acc[r][k][1]);
          }
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      float y[K][J];
      for (int k = 0; k < K; ++k) {
        const Reg b = V::set1(t.bias[k]);
        V::store(y[k], tanh_vec<V>(V::add(acc[r][k][0], b)));
        V::store(y[k] + V::kLanes, tanh_vec<V>(V::add(acc[r][k][1], b)));
      }
      float* dst = t.dst + r * t.dst_row_floats;
      for (int j = 0; j < J; ++j)  // output columns 2 (j0 + j) + px: 2 pixels of K channels apart
        for (int k = 0; k < K; ++k) dst[(j0 + j) * 2 * K + k] = y[k][j];
    }
  }
}
