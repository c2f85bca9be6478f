// split_products.cpp: how accurate float32 on tensor cores can be, emulated on the CPU before (and
// beside) the kernels (`make bench-split`; build/facegen-bench-split [MODEL] [IMAGES] [ALIGN_BITS]
// [SCHEMES], default the faces model, 16 images, 2, every scheme). MODEL is a model file or random:NGF:K:SEED, a seeded
// random network of the family (tests/gpu/reference.hpp; nz 100, nc 3, biases where K is 5).
//
// A tensor core multiplies tf32 operands (11 significant bits) exactly. "3xTF32" writes each float32
// operand as hi + lo (hi = tf32(x), lo = tf32(x - hi)) and adds three products per term, lo*hi + hi*lo
// + hi*hi, dropping lo*lo (2^-22 of the product). How the products are added decides the accuracy.
// The mma model here is the one bench/mma_rounding.cuh measured on an H200 (2026-11-27): one
// mma.sync instruction (k = 8 tf32 or 16 fp16 products and the accumulator c) aligns every term to the
// largest one's exponent, keeping ALIGN_BITS bits below float32's ulp of it and truncating the rest
// toward zero, adds them exactly, and truncates the sum toward zero to float32. The probe's three
// answers ("1 + 0.75 ulp -> 1", "-1 - 0.75 ulp -> -1", "1 + 8 x ulp/4 -> 1 + 2 ulp") hold for every
// ALIGN_BITS >= 2; 2 is the narrowest the probe allows, so the least favourable.
//
// Every layer of a network runs on the same float32 input in each arithmetic below; the program prints
// each one's worst and mean |error| against float64, layer by layer and for the whole network (each
// arithmetic fed its own previous layer, tanh at the end):
//   fp32 FFMA       fmaf, one chain per tap from zero, the taps' sums added in order (the FFMA kernels)
//   tf32            tf32 operands, the mma chain over all of K (the tf32 kernels)
//   3xtf32 ideal    three products per term, each mma rounded to nearest (what RN tensor cores would give)
//   3xtf32 chain    three products per term, the mma chain over all of K, truncating as measured
//   fresh/step      each k step's three mmas (lo*hi, hi*lo, hi*hi, in that order) into a zeroed
//                   accumulator, then added to the running sum with one round-to-nearest FADD
//   fresh/step taps the same into a per-tap sum; the taps' sums added in order (as fp32 FFMA)
//   fresh/4 taps    four k steps (32 terms: one K tile) into the zeroed accumulator, then the FADD
//   3xfp16 taps     fp16 parts (mma m16n8k16, twice tf32's rate): hi = fp16(x), lo = fp16((x - hi) 2^11),
//                   hi*hi and the two cross products in two zeroed accumulators per k step, then
//                   sum += big; sum = fma(small, 2^-11, sum); per-tap sums. (Overflows for |x| > 65504.)
//   wgmma R1        the order of the wgmma kernels (kernels/phase_gemm_wgmma_tf32x3.cuh): per k step of 8
//                   (one wgmma m64nNk8 each) lo*hi with scale-d = 0 (the accumulator's old value
//                   ignored: the same sum as from a zeroed one), then hi*lo and hi*hi into it; every R k
//                   steps one round-to-nearest FADD into the tap's sum, the taps' sums added in order.
//                   R = 1 is 'fresh/step taps', the mma.sync kernels' order, step for step.
//   wgmma R2, R4    the same, FADD every 2 or 4 k steps (4: one K tile of 32 terms): fewer waits for the
//                   tensor cores and fewer FADDs, at the accuracy these rows show
//   wgmma big/small hi*hi per k step from scale-d = 0, FADD into the tap's sum; the cross products chained
//                   in a second accumulator over the whole tap (2^-11 of the sum, so its truncation
//                   counts little), added into the tap's sum at its end
// A fourth argument picks schemes by name, comma-separated (default all), so a long run computes only
// the rows it needs: e.g. "fp32 FFMA,wgmma R1,wgmma R2,wgmma R4".
// It runs on this machine, not a GPU.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "generator/network.hpp"
#include "tests/gpu/reference.hpp"

using namespace facegen;

namespace {

int g_align_bits = 2;  // bits below float32's ulp of the largest term that an mma keeps

enum class Kind { Ffma, Tf32, SplitIdeal, SplitChain, SplitFresh, SplitBigSmall };
enum class Parts { Tf32, Fp16 };
struct Scheme {
  const char* name;
  Kind kind;
  Parts parts = Parts::Tf32;
  int fresh_steps = 1;    // SplitFresh: k steps into one zeroed accumulator before the FADD
  bool tap_sums = false;  // a sum per tap, the taps' sums added in order
  // The wgmma rows: this order in tconv1-3 only; the projection and the last layer run the mma.sync
  // kernels' order (fresh/step taps) there.
  bool tconv13_only = false;
};
const Scheme kSchemes[] = {
    {"fp32 FFMA", Kind::Ffma, Parts::Tf32, 0, true},
    {"tf32", Kind::Tf32},
    {"3xtf32 ideal", Kind::SplitIdeal},
    {"3xtf32 chain", Kind::SplitChain},
    {"fresh/step", Kind::SplitFresh, Parts::Tf32, 1, false},
    {"fresh/step taps", Kind::SplitFresh, Parts::Tf32, 1, true},
    {"fresh/4 taps", Kind::SplitFresh, Parts::Tf32, 4, true},
    {"3xfp16 taps", Kind::SplitFresh, Parts::Fp16, 1, true},
    {"wgmma R1", Kind::SplitFresh, Parts::Tf32, 1, true, true},
    {"wgmma R2", Kind::SplitFresh, Parts::Tf32, 2, true, true},
    {"wgmma R4", Kind::SplitFresh, Parts::Tf32, 4, true, true},
    {"wgmma big/small", Kind::SplitBigSmall, Parts::Tf32, 1, true, true},
};
const Scheme kMmaSyncOrder = {"fresh/step taps", Kind::SplitFresh, Parts::Tf32, 1, true};
// The order scheme `sc` runs in layer `layer` (0 the projection, 1..4 tconv1-4).
const Scheme* scheme_in_layer(const Scheme* sc, int layer) {
  return sc && sc->tconv13_only && (layer == 0 || layer == 4) ? &kMmaSyncOrder : sc;
}
std::vector<const Scheme*> g_schemes;  // the schemes this run computes (argument 4), in table order

float tf32(float x) {  // round to nearest, ties away (cvt.rna.tf32.f32): 10 explicit mantissa bits
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x1000u) & 0xFFFFE000u;
  std::memcpy(&x, &u, 4);
  return x;
}
float fp16(float x) { return static_cast<float>(static_cast<_Float16>(x)); }

float toward_zero(double v) {  // the float of v nearest it toward zero
  const float f = static_cast<float>(v);
  if (std::fabs(static_cast<double>(f)) <= std::fabs(v)) return f;
  return std::nextafter(f, 0.0f);
}

// One mma instruction as measured: c + p[0..count), every term aligned to the largest (ALIGN_BITS
// below its float32 ulp, truncated toward zero), summed exactly, the sum truncated to float32.
float mma_add(float c, const double* p, int count) {
  int e_max = INT_MIN;
  if (c != 0) e_max = std::ilogb(c);
  for (int i = 0; i < count; ++i)
    if (p[i] != 0) e_max = std::max(e_max, std::ilogb(p[i]));
  if (e_max == INT_MIN) return c;
  const double q = std::ldexp(1.0, e_max - 23 - g_align_bits);
  double s = std::trunc(c / q) * q;
  for (int i = 0; i < count; ++i) s += std::trunc(p[i] / q) * q;
  return toward_zero(s);
}
// The same rounded to nearest (3xtf32 ideal).
float mma_add_nearest(float c, const double* p, int count) {
  double s = c;
  for (int i = 0; i < count; ++i) s += p[i];
  return static_cast<float>(s);
}

// A float32 array and its two parts in a scheme's input type.
struct SplitArray {
  std::vector<float> x, hi, lo;
  SplitArray(const float* v, size_t n, Parts parts) : x(v, v + n), hi(n), lo(n) {
    for (size_t i = 0; i < n; ++i) {
      if (parts == Parts::Tf32) {
        hi[i] = tf32(x[i]);
        lo[i] = tf32(x[i] - hi[i]);
      } else {
        hi[i] = fp16(x[i]);
        lo[i] = fp16((x[i] - hi[i]) * 2048.f);
      }
    }
  }
};
struct Operand {  // a pointer into a SplitArray
  const float *x, *hi, *lo;
  Operand at(int64_t i) const { return {x + i, hi + i, lo + i}; }
};
Operand operand(const SplitArray& s) { return {s.x.data(), s.hi.data(), s.lo.data()}; }

// An output's running sum and its current tap's sum.
struct Sum {
  float total = 0, tap = 0;
};

// One tap's `terms` products a . b into `sum` in scheme `sc`.
void add_tap(const Scheme& sc, Operand a, Operand b, int terms, Sum& sum) {
  float& dest = sc.tap_sums ? sum.tap : sum.total;
  double p[16], p2[16];
  if (sc.kind == Kind::Ffma) {
    for (int i = 0; i < terms; ++i) dest = std::fmaf(a.x[i], b.x[i], dest);
  } else if (sc.kind == Kind::Tf32) {
    for (int k = 0; k < terms; k += 8) {
      const int count = std::min(terms - k, 8);
      for (int i = 0; i < count; ++i) p[i] = double(tf32(a.x[k + i])) * tf32(b.x[k + i]);
      dest = mma_add(dest, p, count);
    }
  } else if (sc.kind == Kind::SplitIdeal || sc.kind == Kind::SplitChain) {
    auto add = sc.kind == Kind::SplitIdeal ? mma_add_nearest : mma_add;
    for (int k = 0; k < terms; k += 8) {
      const int count = std::min(terms - k, 8);
      for (int i = 0; i < count; ++i) p[i] = double(a.lo[k + i]) * b.hi[k + i];
      dest = add(dest, p, count);
      for (int i = 0; i < count; ++i) p[i] = double(a.hi[k + i]) * b.lo[k + i];
      dest = add(dest, p, count);
      for (int i = 0; i < count; ++i) p[i] = double(a.hi[k + i]) * b.hi[k + i];
      dest = add(dest, p, count);
    }
  } else if (sc.kind == Kind::SplitBigSmall) {
    float small = 0;
    for (int k = 0; k < terms; k += 8) {
      const int count = std::min(terms - k, 8);
      for (int i = 0; i < count; ++i) p[i] = double(a.lo[k + i]) * b.hi[k + i];
      small = mma_add(small, p, count);
      for (int i = 0; i < count; ++i) p[i] = double(a.hi[k + i]) * b.lo[k + i];
      small = mma_add(small, p, count);
      for (int i = 0; i < count; ++i) p[i] = double(a.hi[k + i]) * b.hi[k + i];
      dest += mma_add(0.0f, p, count);
    }
    dest += small;
  } else {
    const int step = sc.parts == Parts::Tf32 ? 8 : 16;
    float big = 0, small = 0;
    int steps = 0;
    for (int k = 0; k < terms; k += step) {
      const int count = std::min(terms - k, step);
      if (sc.parts == Parts::Tf32) {
        for (int i = 0; i < count; ++i) p[i] = double(a.lo[k + i]) * b.hi[k + i];
        big = mma_add(big, p, count);
        for (int i = 0; i < count; ++i) p[i] = double(a.hi[k + i]) * b.lo[k + i];
        big = mma_add(big, p, count);
      } else {
        for (int i = 0; i < count; ++i) p2[i] = double(a.lo[k + i]) * b.hi[k + i];
        small = mma_add(small, p2, count);
        for (int i = 0; i < count; ++i) p2[i] = double(a.hi[k + i]) * b.lo[k + i];
        small = mma_add(small, p2, count);
      }
      for (int i = 0; i < count; ++i) p[i] = double(a.hi[k + i]) * b.hi[k + i];
      big = mma_add(big, p, count);
      if (++steps == sc.fresh_steps || k + step >= terms) {
        dest += big;
        if (sc.parts == Parts::Fp16) dest = std::fmaf(small, 1.0f / 2048, dest);
        big = small = 0;
        steps = 0;
      }
    }
  }
  if (sc.tap_sums) {
    sum.total += sum.tap;
    sum.tap = 0;
  }
}

// float64: sc == nullptr.
double dot64(Operand a, Operand b, int terms) {
  double s = 0;
  for (int i = 0; i < terms; ++i) s += double(a.x[i]) * b.x[i];
  return s;
}

void parallel_images(int n, const std::function<void(int, int)>& run) {
  const int threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (int p = 0; p < threads; ++p) pool.emplace_back(run, n * p / threads, n * (p + 1) / threads);
  for (auto& th : pool) th.join();
}

// Layers on float32 inputs; outputs in double (float64 when sc is null, else the scheme's floats).
// z (n, nz) -> (n, 16 C0)
std::vector<double> projection(const Network& net, const std::vector<float>& z, int n, const Scheme* sc) {
  const ModelSpec& s = net.spec();
  const int k_out = s.proj_outputs(), nz = s.latent_dim;
  const Parts parts = sc ? sc->parts : Parts::Tf32;
  std::vector<float> wt(static_cast<size_t>(nz) * k_out);  // (k_out, nz)
  for (int o = 0; o < k_out; ++o)
    for (int i = 0; i < nz; ++i) wt[int64_t{o} * nz + i] = net.proj_weight()[int64_t{i} * k_out + o];
  const SplitArray zs(z.data(), z.size(), parts), ws(wt.data(), wt.size(), parts);
  std::vector<double> out(static_cast<size_t>(n) * k_out);
  parallel_images(n, [&](int begin, int end) {
    for (int img = begin; img < end; ++img)
      for (int o = 0; o < k_out; ++o) {
        const Operand a = operand(zs).at(int64_t{img} * nz), b = operand(ws).at(int64_t{o} * nz);
        double v;
        if (!sc) {
          v = dot64(a, b, nz) + net.proj_bias()[o];
        } else {
          Sum sum;
          add_tap(*sc, a, b, nz, sum);
          v = sum.total + net.proj_bias()[o];
        }
        out[int64_t{img} * k_out + o] = v;
      }
  });
  return out;
}

// (n, h, h, c_in) -> (n, 2h, 2h, c_out): each output gathers its taps (kh with oy = 2i + kh - 1), in
// the kernels' tap order (kh, then kw, ascending).
std::vector<double> tconv(const TConvView& t, const std::vector<float>& in, int n, const Scheme* sc) {
  const int h = t.size_in, oh = 2 * h, k = t.kernel_size;
  const Parts parts = sc ? sc->parts : Parts::Tf32;
  const SplitArray xs(in.data(), in.size(), parts);
  const SplitArray ws(t.weight, static_cast<size_t>(k) * k * t.c_out * t.c_in, parts);
  std::vector<double> out(static_cast<size_t>(n) * oh * oh * t.c_out);
  parallel_images(n, [&](int img_begin, int img_end) {
    for (int img = img_begin; img < img_end; ++img)
      for (int oy = 0; oy < oh; ++oy)
        for (int ox = 0; ox < oh; ++ox)
          for (int co = 0; co < t.c_out; ++co) {
            double total = 0;
            Sum sum;
            for (int kh = 0; kh < k; ++kh) {
              if ((oy + 1 - kh) % 2 != 0 || oy + 1 - kh < 0 || (oy + 1 - kh) / 2 >= h) continue;
              for (int kw = 0; kw < k; ++kw) {
                if ((ox + 1 - kw) % 2 != 0 || ox + 1 - kw < 0 || (ox + 1 - kw) / 2 >= h) continue;
                const int i = (oy + 1 - kh) / 2, j = (ox + 1 - kw) / 2;
                const Operand x = operand(xs).at(((int64_t{img} * h + i) * h + j) * t.c_in);
                const Operand w = operand(ws).at(((int64_t{kh} * k + kw) * t.c_out + co) * t.c_in);
                if (!sc) total += dot64(x, w, t.c_in);
                else add_tap(*sc, x, w, t.c_in, sum);
              }
            }
            out[((int64_t{img} * oh + oy) * oh + ox) * t.c_out + co] =
                sc ? static_cast<double>(sum.total + t.bias[co]) : total + t.bias[co];
          }
  });
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
    worst = std::max(worst, std::isfinite(e) ? e : INFINITY);
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
  if (argc > 3) g_align_bits = std::atoi(argv[3]);
  if (n < 1 || g_align_bits < 0 || g_align_bits > 20) {
    std::fprintf(stderr, "facegen-bench-split: IMAGES must be >= 1 and ALIGN_BITS 0..20\n");
    return 1;
  }
  const std::string wanted = argc > 4 ? "," + std::string(argv[4]) + "," : "";
  for (const Scheme& sc : kSchemes)
    if (wanted.empty() || wanted.find("," + std::string(sc.name) + ",") != std::string::npos) g_schemes.push_back(&sc);
  if (g_schemes.empty()) {
    std::fprintf(stderr, "facegen-bench-split: no scheme is named in '%s'\n", argv[4]);
    return 1;
  }
  const int kSchemeCount = static_cast<int>(g_schemes.size());
  Network net;
  int ngf = 0, ksize = 0;
  unsigned seed = 0;
  if (std::sscanf(model.c_str(), "random:%d:%d:%u", &ngf, &ksize, &seed) == 3) {
    const ModelSpec spec{100, ngf, 3, ksize, ksize == 5};
    net = Network(spec, reference::random_network(seed, spec));
  } else {
    net = load_network(model);
  }
  const ModelSpec& s = net.spec();
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> z(static_cast<size_t>(n) * s.latent_dim);
  for (float& v : z) v = normal(rng);
  std::printf("%s (%s), %d images, mma alignment %d bits below the ulp; |error| against float64, worst / mean\n",
              model.c_str(), describe_spec(s).c_str(), n, g_align_bits);
  std::printf("%-8s", "layer");
  for (const Scheme* sc : g_schemes) std::printf(" | %-21s", sc->name);
  std::printf("\n");

  // Layer by layer: every arithmetic on the float64 pass's own input, rounded to float.
  std::vector<double> ref = projection(net, z, n, nullptr);
  std::vector<std::vector<double>> chained(kSchemeCount);
  auto print_row = [&](const std::string& layer, const std::vector<Error>& errors) {
    std::printf("%-8s", layer.c_str());
    for (const Error& e : errors) std::printf(" | %9.2e / %9.2e", e.worst, e.sum / static_cast<double>(e.count));
    std::printf("\n");
    std::fflush(stdout);
  };
  std::vector<Error> errors;
  for (int m = 0; m < kSchemeCount; ++m) {
    chained[m] = projection(net, z, n, scheme_in_layer(g_schemes[m], 0));
    errors.push_back(compare(chained[m], ref, false));
  }
  print_row("proj", errors);
  for (int stage = 0; stage < 4; ++stage) {
    const std::vector<float> in = bn_relu(net.batchnorm(stage), ref);
    const std::vector<double> next = tconv(net.tconv(stage), in, n, nullptr);
    errors.clear();
    for (int m = 0; m < kSchemeCount; ++m)
      errors.push_back(compare(tconv(net.tconv(stage), in, n, scheme_in_layer(g_schemes[m], stage + 1)), next, false));
    print_row("tconv" + std::to_string(stage + 1), errors);
    for (int m = 0; m < kSchemeCount; ++m)
      chained[m] = tconv(net.tconv(stage), bn_relu(net.batchnorm(stage), chained[m]), n, scheme_in_layer(g_schemes[m], stage + 1));
    ref = next;
  }
  // The whole network: each arithmetic fed its own layers; the float64 chain fed the float-rounded
  // inputs above, as every float32 backend is.
  errors.clear();
  for (int m = 0; m < kSchemeCount; ++m) errors.push_back(compare(chained[m], ref, true));
  print_row("network", errors);
  return 0;
}
