// layer_reference.hpp: the float64 references and checks that the CPU layer tests share.
//
// The references are written differently from the code under test (the transposed convolution as
// a scatter over input pixels and taps, everything in double). Outputs under test start as NaN
// (kPoison), so an element left unwritten fails check_close.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace facegen_test {

constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();

inline std::vector<float> random_floats(std::mt19937_64& rng, int64_t count, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(count);
  for (float& x : v) x = dist(rng);
  return v;
}

// |got - ref| <= atol + rtol * |ref| everywhere; prints the first few mismatches.
inline void check_close(const std::vector<float>& got, const std::vector<double>& ref, double atol,
                        double rtol, const std::string& what) {
  REQUIRE(got.size() == ref.size());
  int64_t bad = 0;
  std::ostringstream report;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - ref[i]);
    if (!(err <= atol + rtol * std::fabs(ref[i]))) {  // NaN fails too
      if (bad < 5) report << "\n  [" << i << "] got " << got[i] << ", expected " << ref[i];
      ++bad;
    }
  }
  INFO(what << ": " << bad << " of " << got.size() << " values out of tolerance" << report.str());
  CHECK(bad == 0);
}

inline void check_identical(const std::vector<float>& a, const std::vector<float>& b,
                            const std::string& what) {
  REQUIRE(a.size() == b.size());
  INFO(what);
  CHECK(std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0);
}

inline std::vector<double> projection_ref(const std::vector<float>& z, int n, int k_in, int k_out,
                                          const float* weight, const float* bias) {
  std::vector<double> out(int64_t(n) * k_out);
  for (int img = 0; img < n; ++img)
    for (int o = 0; o < k_out; ++o) {
      double s = bias[o];
      for (int i = 0; i < k_in; ++i)
        s += double(z[img * k_in + i]) * weight[int64_t(i) * k_out + o];
      out[int64_t(img) * k_out + o] = s;
    }
  return out;
}

inline std::vector<double> batchnorm_relu_ref(const std::vector<float>& in, int channels,
                                              const float* beta, const float* gamma,
                                              const float* mean, const float* var) {
  std::vector<double> out(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const int c = static_cast<int>(i % channels);
    const double v =
        (in[i] - double(mean[c])) / std::sqrt(double(var[c]) + 1e-5) * gamma[c] + beta[c];
    out[i] = v > 0 ? v : 0;
  }
  return out;
}

// Scatter form: every input pixel and tap adds into the output pixel it lands on.
// in (n, h, w, c_in); weight (k, k, c_out, c_in); out (n, 2h, 2w, c_out).
inline std::vector<double> tconv_ref(const std::vector<float>& in, int n, int h, int w, int c_in,
                                     int k, const float* weight, const float* bias, int c_out) {
  const int oh = 2 * h, ow = 2 * w;
  std::vector<double> out(int64_t(n) * oh * ow * c_out);
  for (int img = 0; img < n; ++img) {
    double* o = out.data() + int64_t(img) * oh * ow * c_out;
    for (int p = 0; p < oh * ow; ++p)
      for (int k = 0; k < c_out; ++k) o[int64_t(p) * c_out + k] = bias[k];
    for (int i = 0; i < h; ++i)
      for (int j = 0; j < w; ++j) {
        const float* x = in.data() + ((int64_t(img) * h + i) * w + j) * c_in;
        for (int kh = 0; kh < k; ++kh)
          for (int kw = 0; kw < k; ++kw) {
            const int oy = 2 * i + kh - 1, ox = 2 * j + kw - 1;
            if (oy < 0 || oy >= oh || ox < 0 || ox >= ow) continue;
            for (int o_c = 0; o_c < c_out; ++o_c) {
              const float* wt = weight + ((int64_t(kh) * k + kw) * c_out + o_c) * c_in;
              double s = 0;
              for (int c = 0; c < c_in; ++c) s += double(x[c]) * wt[c];
              o[(int64_t(oy) * ow + ox) * c_out + o_c] += s;
            }
          }
      }
  }
  return out;
}

}  // namespace facegen_test
