// bench_cpu.cpp: `make bench-cpu`, the CPU backend in images/s and GFLOP/s beside this CPU's
// multiply-add ceiling (bench/cpu_pytorch.py then puts PyTorch beside it).
//
// Two random networks: the SHPC one and the PyTorch DCGAN tutorial's generator (k = 4, ngf 64). First
// the check: each backend's images against the simple reference layers (reference_forward),
// "check: OK" or a non-zero exit. Then, best of --rounds: each fast layer of both on one chunk of
// images, the whole backend on --images images with 1 and all threads (the tutorial's with all;
// wall time and CPU time: on a busy machine images per CPU-second shows the code's speed better
// than wall time), and the FMA ceiling per thread.
//
//   build/facegen-bench-cpu [--images N] [--rounds R] [--threads T]
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench/fma_peak.hpp"
#include "common/clock.hpp"
#include "common/model_spec.hpp"
#include "common/threads.hpp"
#include "generator/backend.hpp"
#include "generator/network.hpp"
#include "generator/reference_forward.hpp"
#include "kernels/cpu/phase_gemm_cpu.hpp"

using namespace facegen;

namespace {

constexpr double kImageFlops = 326.0e6;  // multiply-adds x 2 of one image, every tap counted

double cpu_seconds() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_utime.tv_usec * 1e-6 + usage.ru_stime.tv_sec +
         usage.ru_stime.tv_usec * 1e-6;
}

struct Timing {
  double wall = 1e30, cpu = 1e30;  // best of the rounds
};

Timing best_of(int rounds, const std::function<void()>& body) {
  Timing best;
  for (int r = 0; r < rounds; ++r) {
    const double cpu0 = cpu_seconds();
    const auto start = Clock::now();
    body();
    best.wall = std::min(best.wall, seconds_since(start));
    best.cpu = std::min(best.cpu, cpu_seconds() - cpu0);
  }
  return best;
}

// The backend's first `count` images of `net` against the reference layers (reference_forward,
// float32, as the old CPU backend ran them): prints the verdict, returns whether every value is
// finite and within 1e-4.
bool check_backend(const char* name, const Network& net, const BackendOptions& options,
                   const std::vector<float>& z, int64_t count) {
  const int64_t values = count * net.spec().image_values();
  std::vector<float> images(values, std::nanf("")), ref(values, std::nanf(""));
  make_cpu_backend(net, options)->generate(z.data(), count, images.data());
  const bool ran = reference_forward(net, z.data(), count, ref.data(), 0);
  double worst = 0;
  bool all_finite = ran;
  for (int64_t i = 0; i < values; ++i) {
    all_finite = all_finite && std::isfinite(images[i]) && std::isfinite(ref[i]);
    worst = std::max(worst, double(std::fabs(images[i] - ref[i])));
  }
  const bool ok = all_finite && worst <= 1e-4;
  std::printf("check%s: %s (%lld images against the reference layers, largest difference %.2g)\n",
              name, ok ? "OK" : "FAILED", static_cast<long long>(count), worst);
  return ok;
}

// The weights of one network's layers, as the fast layers take them.
struct Layers {
  const float* proj_weight;  // (nz, 16 * C0)
  const float* proj_bias;
  int nz;
  BatchNormView bn[kNumStages];
  TConvView tconv[kNumStages];
};

Layers layers_of(const Network& net) {
  Layers l{net.proj_weight(), net.proj_bias(), net.spec().latent_dim, {}, {}};
  for (int s = 0; s < kNumStages; ++s) {
    l.bn[s] = net.batchnorm(s);
    l.tconv[s] = net.tconv(s);
  }
  return l;
}

// Multiply-adds x 2 of one image of a network of `spec`, every tap counted.
double image_flops(const ModelSpec& spec) {
  double flops = 2.0 * spec.latent_dim * spec.proj_outputs();
  for (int s = 0; s < kNumStages; ++s)
    flops += 2.0 * ModelSpec::stage_size(s) * ModelSpec::stage_size(s) * spec.kernel_size *
             spec.kernel_size * spec.stage_channels(s) * spec.stage_channels(s + 1);
  return flops;
}

// Each fast layer alone on `batch` images: seconds and GFLOP/s, best of `rounds`; then the images
// per CPU-second that the layers' CPU times add up to. Lines start with `label`.
void time_layers(const char* label, const Layers& net, CpuIsa isa, int64_t batch, int rounds,
                 ThreadShare& pool) {
  std::vector<std::vector<float>> act(kNumStages);
  for (int s = 0; s < kNumStages; ++s)
    act[s].assign(batch * padded_floats(net.tconv[s].size_in, net.tconv[s].c_in), 0.5f);
  const TConvView& last_tc = net.tconv[kNumStages - 1];
  std::vector<float> z(batch * net.nz, 0.25f),
      images(batch * 4 * last_tc.size_in * last_tc.size_in * last_tc.c_out);
  const PackedLayer proj = pack_projection(net.proj_weight, net.proj_bias, net.nz, net.bn[0], isa);
  double cpu_per_image = 0;
  auto report = [&](const char* name, double flops_per_image, const Timing& t) {
    std::printf("%s %-10s %8.3f ms for %lld images  %7.1f GFLOP/s  %7.1f GFLOP per CPU-second\n",
                label, name, t.wall * 1e3, static_cast<long long>(batch),
                flops_per_image * batch / t.wall / 1e9, flops_per_image * batch / t.cpu / 1e9);
    cpu_per_image += t.cpu / batch;
  };
  report("projection", 2.0 * net.nz * proj.c_out, best_of(rounds, [&] {
           projection_relu_fast(proj, z.data(), batch, act[0].data(), pool);
         }));
  for (int s = 0; s < kNumStages; ++s) {
    const bool last = s + 1 == kNumStages;
    const TConvView& tc = net.tconv[s];
    const PackedLayer layer = pack_tconv(tc, last ? nullptr : &net.bn[s + 1], isa);
    const double flops =
        2.0 * tc.size_in * tc.size_in * tc.kernel_size * tc.kernel_size * tc.c_in * tc.c_out;
    const std::string name = "tconv" + std::to_string(s + 1);
    report(name.c_str(), flops, best_of(rounds, [&] {
             if (last)
               tconv_tanh_fast(layer, act[s].data(), batch, images.data(), pool);
             else
               tconv_relu_fast(layer, act[s].data(), batch, act[s + 1].data(), s == 2, pool);
           }));
  }
  std::printf("%s all        %8.1f images per CPU-second, the layers' CPU times added\n", label,
              1.0 / cpu_per_image);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = 512;
  int rounds = 3, threads = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--images") == 0)
      n = std::atoll(argv[i + 1]);
    else if (std::strcmp(argv[i], "--rounds") == 0)
      rounds = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--threads") == 0)
      threads = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: facegen-bench-cpu [--images N] [--rounds R] [--threads T]\n");
      return 2;
    }
  }
  threads = resolve_threads(threads);
  const CpuIsa isa = best_cpu_isa();
  const Network net = make_random_network(1);
  // The PyTorch DCGAN tutorial's generator (k = 4, nz 100, ngf 64, nc 3, no biases), random
  // weights.
  const ModelSpec tutorial = kTutorialSpec;
  const Network tutorial_net = make_random_network(tutorial, 5);
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal;
  std::vector<float> z(n * kLatentDim);
  for (float& v : z) v = normal(rng);

  BackendOptions options;
  options.device = DeviceKind::Cpu;
  options.threads = threads;
  auto backend = make_cpu_backend(net, options);
  std::printf("backend %s\n", backend->describe().c_str());

  const int64_t checked = std::min<int64_t>(n, 8);
  if (!check_backend("", net, options, z, checked) ||
      !check_backend(" dcgan-k4", tutorial_net, options, z, checked))
    return 1;
  std::vector<float> images(n * kImageValues);

  {
    ThreadShare pool(threads);
    time_layers("layer", layers_of(net), isa, 16, rounds, pool);
    time_layers("dcgan-k4", layers_of(tutorial_net), isa, 16, rounds, pool);
  }
  for (int t : {1, threads}) {
    options.threads = t;
    auto timed = make_cpu_backend(net, options);
    const Timing tm = best_of(rounds, [&] { timed->generate(z.data(), n, images.data()); });
    std::printf("facegen %d thread%s %7.1f images/s  %6.1f GFLOP/s   %7.1f images per CPU-second\n",
                t, t == 1 ? ": " : "s:", n / tm.wall, n * kImageFlops / tm.wall / 1e9, n / tm.cpu);
    if (t == threads) break;
  }
  {
    options.threads = threads;
    auto timed = make_cpu_backend(tutorial_net, options);
    const Timing tm = best_of(rounds, [&] { timed->generate(z.data(), n, images.data()); });
    std::printf(
        "dcgan-k4 %d threads: %7.1f images/s  %6.1f GFLOP/s   %7.1f images per CPU-second\n",
        threads, n / tm.wall, n * image_flops(tutorial) / tm.wall / 1e9, n / tm.cpu);
  }
  for (int lanes : {16, 8}) {
    if (!cpu_supports(lanes == 16 ? CpuIsa::Avx512 : CpuIsa::Avx2)) continue;
    std::vector<FmaRate> rates(threads);
    parallel_for(threads, threads, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) rates[i] = fma_rate(lanes, 200000000 / lanes);
    });
    double total = 0, per_cpu = 0;
    for (const FmaRate& r : rates) {
      total += r.per_second;
      per_cpu += r.per_cpu_second / threads;
    }
    std::printf(
        "FMA ceiling %d-bit, %d threads: %6.1f GFLOP/s (%.1f images/s at 326 MFLOP)  "
        "%6.1f GFLOP per CPU-second\n",
        lanes * 32, threads, total / 1e9, total / kImageFlops, per_cpu / 1e9);
  }
  return 0;
}
