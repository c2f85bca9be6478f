// split_products.cpp: how accurate float32 on tensor cores can be, emulated on the CPU before any
// kernel is written (`make bench-split`; build/facegen-bench-split [MODEL] [IMAGES], default the faces
// model and 16 images).
//
// A tensor core multiplies tf32 operands (11 significant bits) exactly and adds them into float32.
// "3xTF32" writes each float32 operand as hi + lo (hi = tf32(x), lo = tf32(x - hi)) and adds three
// products, lo*hi + hi*lo + hi*hi, dropping lo*lo. This program runs every layer of a network on the
// same float32 input in several arithmetics and prints each one's worst and mean |error| against
// float64, layer by layer and for the whole network (each arithmetic fed its own previous layer):
//   fp32 FFMA      fmaf, one accumulator per tap (the FFMA kernels' per-tap partial sums), taps added
//   fp32 FFMA seq  fmaf, one accumulator over every tap and channel
//   tf32           one product per term, tf32 operands
//   3xtf32 RN      three products; a tensor-core step (k = 8 terms) modelled as the exact sum of its
//                  products added to the accumulator with one round-to-nearest
//   3xtf32 RN taps the same with one accumulator per tap, as "fp32 FFMA"
//   3xtf32 RZ      the same, the step's result truncated toward zero (if the hardware truncates)
//   3xtf32 RZ taps the same with one accumulator per tap
//   3xtf32 RZ fresh each step's three products into a zeroed accumulator (truncated once), then
//                  added to the running sum with round-to-nearest (an FADD per step)
//   3xtf32 seq     three products, each added with its own rounding (the worst order)
// It runs on this machine, not a GPU: the hardware's own accumulation is measured on the GPU machine.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "generator/network.hpp"

using namespace facegen;

namespace {

enum Mode { kFfmaTaps, kFfmaSeq, kTf32, kSplitRn, kSplitRnTaps, kSplitRz, kSplitRzTaps, kSplitRzFresh, kSplitSeq, kModes };
const char* const kModeNames[kModes] = {"fp32 FFMA",      "fp32 FFMA seq", "tf32",           "3xtf32 RN",   "3xtf32 RN taps",
                                        "3xtf32 RZ",      "3xtf32 RZ taps", "3xtf32 RZ fresh", "3xtf32 seq"};
bool per_tap(int mode) { return mode == kFfmaTaps || mode == kSplitRnTaps || mode == kSplitRzTaps; }

float tf32(float x) {  // round to nearest, ties away (cvt.rna.tf32.f32): 10 explicit mantissa bits
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x1000u) & 0xFFFFE000u;
  std::memcpy(&x, &u, 4);
  return x;
}

float toward_zero(double v) {  // the float of v nearest it toward zero
  const float f = static_cast<float>(v);
  if (std::fabs(static_cast<double>(f)) <= std::fabs(v)) return f;
  return std::nextafter(f, 0.0f);
}

// init + a (terms) . b (terms), in `mode`; the terms come in steps of 8 (a tensor core's k), the last
// step shorter. Float64 (init ignored) when mode < 0.
double dot(const float* a, const float* b, int terms, int mode, float init = 0) {
  if (mode < 0) {
    double s = 0;
    for (int i = 0; i < terms; ++i) s += static_cast<double>(a[i]) * b[i];
    return s;
  }
  if (mode == kFfmaTaps || mode == kFfmaSeq) {
    float s = init;  // (init: the sum so far of the taps before, in one accumulator)
    for (int i = 0; i < terms; ++i) s = std::fmaf(a[i], b[i], s);
    return s;
  }
  if (mode == kTf32) {
    float s = init;
    for (int k = 0; k < terms; k += 8) {
      double step = s;
      for (int i = k; i < std::min(terms, k + 8); ++i) step += static_cast<double>(tf32(a[i])) * tf32(b[i]);
      s = static_cast<float>(step);
    }
    return s;
  }
  float s = init;
  for (int k = 0; k < terms; k += 8) {
    const int count = std::min(terms, k + 8) - k;
    float ah[8], al[8], bh[8], bl[8];  // each term's high and low tf32 parts, split once
    for (int i = 0; i < count; ++i) {
      ah[i] = tf32(a[k + i]);
      al[i] = tf32(a[k + i] - ah[i]);
      bh[i] = tf32(b[k + i]);
      bl[i] = tf32(b[k + i] - bh[i]);
    }
    if (mode == kSplitSeq) {
      for (int i = 0; i < count; ++i) {
        s += al[i] * bh[i];
        s += ah[i] * bl[i];
        s += ah[i] * bh[i];
      }
      continue;
    }
    if (mode == kSplitRzFresh) {
      double step = 0;
      for (int i = 0; i < count; ++i)
        step += static_cast<double>(al[i]) * bh[i] + static_cast<double>(ah[i]) * bl[i] + static_cast<double>(ah[i]) * bh[i];
      s += toward_zero(step);
      continue;
    }
    // Three tensor-core steps: lo*hi, hi*lo, hi*hi, each rounded once into the accumulator.
    const float* parts[3][2] = {{al, bh}, {ah, bl}, {ah, bh}};
    for (const auto& part : parts) {
      double step = s;
      for (int i = 0; i < count; ++i) step += static_cast<double>(part[0][i]) * part[1][i];
      s = mode == kSplitRz || mode == kSplitRzTaps ? toward_zero(step) : static_cast<float>(step);
    }
  }
  return s;
}

// Layers on float32 inputs; outputs in double (the float64 reference) or as the mode's floats.
// in (n, nz) -> (n, 16 C0)
std::vector<double> projection(const Network& net, const std::vector<float>& z, int n, int mode) {
  const ModelSpec& s = net.spec();
  const int k_out = s.proj_outputs();
  std::vector<float> wt(static_cast<size_t>(s.latent_dim));
  std::vector<double> out(static_cast<size_t>(n) * k_out);
  for (int o = 0; o < k_out; ++o) {
    for (int i = 0; i < s.latent_dim; ++i) wt[i] = net.proj_weight()[int64_t{i} * k_out + o];
    for (int img = 0; img < n; ++img) {
      const double v = dot(z.data() + int64_t{img} * s.latent_dim, wt.data(), s.latent_dim, mode);
      out[int64_t{img} * k_out + o] = mode < 0 ? v + net.proj_bias()[o] : static_cast<float>(v) + net.proj_bias()[o];
    }
  }
  return out;
}

// (n, h, h, c_in) -> (n, 2h, 2h, c_out): each output gathers its taps (kh with oy = 2i + kh - 1).
std::vector<double> tconv(const TConvView& t, const std::vector<float>& in, int n, int mode) {
  const int h = t.size_in, oh = 2 * h, k = t.kernel_size;
  std::vector<double> out(static_cast<size_t>(n) * oh * oh * t.c_out);
  auto run = [&](int img_begin, int img_end) {
    for (int img = img_begin; img < img_end; ++img)
      for (int oy = 0; oy < oh; ++oy)
        for (int ox = 0; ox < oh; ++ox)
          for (int co = 0; co < t.c_out; ++co) {
            double total = 0;
            float total_f = 0;
            for (int kh = 0; kh < k; ++kh) {
              if ((oy + 1 - kh) % 2 != 0 || oy + 1 - kh < 0 || (oy + 1 - kh) / 2 >= h) continue;
              for (int kw = 0; kw < k; ++kw) {
                if ((ox + 1 - kw) % 2 != 0 || ox + 1 - kw < 0 || (ox + 1 - kw) / 2 >= h) continue;
                const int i = (oy + 1 - kh) / 2, j = (ox + 1 - kw) / 2;
                const float* x = in.data() + ((int64_t{img} * h + i) * h + j) * t.c_in;
                const float* w = t.weight + ((int64_t{kh} * k + kw) * t.c_out + co) * t.c_in;
                if (per_tap(mode)) {
                  total_f += static_cast<float>(dot(x, w, t.c_in, mode));
                } else if (mode < 0) {
                  total += dot(x, w, t.c_in, mode);
                } else {  // one accumulator over every tap
                  total_f = static_cast<float>(dot(x, w, t.c_in, mode, total_f));
                }
              }
            }
            out[((int64_t{img} * oh + oy) * oh + ox) * t.c_out + co] =
                mode < 0 ? total + t.bias[co] : static_cast<double>(total_f + t.bias[co]);
          }
  };
  const int threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (int p = 0; p < threads; ++p) pool.emplace_back(run, n * p / threads, n * (p + 1) / threads);
  for (auto& th : pool) th.join();
  return out;
}

// batch norm + ReLU in float (as every backend); before tconv `stage`.
std::vector<float> bn_relu(const BatchNormView& b, const std::vector<double>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const int c = static_cast<int>(i % b.channels);
    const float v = (static_cast<float>(x[i]) - b.mean[c]) / std::sqrt(b.var[c] + 1e-5f) * b.gamma[c] + b.beta[c];
    out[i] = v > 0 ? v : 0;
  }
  return out;
}

struct Error {
  double worst = 0, sum = 0;
  int64_t count = 0;
  void add(double got, double want) {
    const double e = std::fabs(got - want);
    worst = std::max(worst, e);
    sum += e;
    ++count;
  }
};

Error compare(const std::vector<double>& got, const std::vector<double>& want, bool apply_tanh) {
  Error e;
  for (size_t i = 0; i < got.size(); ++i)
    e.add(apply_tanh ? std::tanh(static_cast<float>(got[i])) : got[i], apply_tanh ? std::tanh(want[i]) : want[i]);
  return e;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string model = argc > 1 ? argv[1] : "models/facegen-faces.safetensors";
  const int n = argc > 2 ? std::atoi(argv[2]) : 16;
  const Network net = load_network(model);
  const ModelSpec& s = net.spec();
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> z(static_cast<size_t>(n) * s.latent_dim);
  for (float& v : z) v = normal(rng);
  std::printf("%s (%s), %d images; |error| against float64, worst / mean\n", model.c_str(), describe_spec(s).c_str(), n);
  std::printf("%-8s", "layer");
  for (const char* name : kModeNames) std::printf(" | %-21s", name);
  std::printf("\n");

  // Layer by layer: every arithmetic on the float64 pass's own input, rounded to float.
  std::vector<double> ref = projection(net, z, n, -1);
  std::vector<std::vector<double>> chained(kModes);
  auto print_row = [&](const std::string& layer, const std::vector<Error>& errors) {
    std::printf("%-8s", layer.c_str());
    for (const Error& e : errors) std::printf(" | %9.2e / %9.2e", e.worst, e.sum / static_cast<double>(e.count));
    std::printf("\n");
    std::fflush(stdout);
  };
  std::vector<Error> errors;
  for (int m = 0; m < kModes; ++m) {
    chained[m] = projection(net, z, n, m);
    errors.push_back(compare(chained[m], ref, false));
  }
  print_row("proj", errors);
  for (int stage = 0; stage < 4; ++stage) {
    const std::vector<float> in = bn_relu(net.batchnorm(stage), ref);
    const std::vector<double> next = tconv(net.tconv(stage), in, n, -1);
    errors.clear();
    for (int m = 0; m < kModes; ++m) errors.push_back(compare(tconv(net.tconv(stage), in, n, m), next, false));
    print_row("tconv" + std::to_string(stage + 1), errors);
    for (int m = 0; m < kModes; ++m) chained[m] = tconv(net.tconv(stage), bn_relu(net.batchnorm(stage), chained[m]), n, m);
    ref = next;
  }
  // The whole network: each arithmetic fed its own layers; the float64 chain fed the float-rounded
  // inputs above, as every float32 backend is.
  errors.clear();
  for (int m = 0; m < kModes; ++m) errors.push_back(compare(chained[m], ref, true));
  print_row("network", errors);
  return 0;
}
