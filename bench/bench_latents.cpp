// bench_latents.cpp: `make bench-latents`, the latent text parser in MB/s and images/s per thread count.
//
// Writes a latent file of N images as make-latents does ("%.6f", one line per image) under /tmp (or
// $BENCH_DIR). First checks: every thread count must read the same floats, bit for bit, as one serial
// reader ("check: OK"); then times, best of 3: strtof alone over the file's tokens in memory (the
// baseline: what the parser did per number before), the serial streaming reader, and reading by
// ranges (token map included) on 1, 2, 4, ... threads up to every CPU. Beside wall-clock MB/s and
// images/s it prints MB per CPU-second, the speed of one busy core, which other work on a shared
// machine does not change. Exit 1 on a mismatch.
//
//   build/facegen-bench-latents [--images N]    (default 50000)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/model_shape.hpp"
#include "common/threads.hpp"
#include "latents/latent_source.hpp"
#include "latents/latents.hpp"

using namespace facegen;

namespace {

struct Timing {
  double wall = 1e30;  // seconds, the best of 3
  double cpu = 1e30;   // CPU seconds of the whole process in that run: its work whatever else runs
};

double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

Timing best_of_3(const std::function<void()>& body) {
  Timing best;
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = cpu_seconds();
    body();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (wall < best.wall) best = Timing{wall, cpu_seconds() - cpu_start};
  }
  return best;
}

void report(const std::string& name, int64_t images, int64_t bytes, const Timing& t) {
  std::printf("%-34s %8.0f MB/s %10.0f images/s   %8.0f MB per CPU-second\n", name.c_str(), bytes / t.wall / 1e6,
              images / t.wall, bytes / t.cpu / 1e6);
}

std::vector<float> read_ranged(const std::string& path, int threads) {
  std::unique_ptr<LatentSource> source = open_latent_file(path);
  source->set_threads(threads);
  std::vector<float> values(static_cast<size_t>(source->count()) * kLatentDim);  // (N, 100)
  source->read(values.data(), source->count());
  source->finish();
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t images = 50000;
  if (argc == 3 && std::strcmp(argv[1], "--images") == 0) images = std::atoll(argv[2]);
  if (images < 1) {
    std::fprintf(stderr, "usage: %s [--images N]\n", argv[0]);
    return 2;
  }
  const char* dir = std::getenv("BENCH_DIR");
  const std::string path = std::string(dir ? dir : "/tmp") + "/facegen-bench-latents-" + std::to_string(::getpid()) + ".txt";
  std::string text = std::to_string(images) + "\n";
  for (int64_t i = 0; i < images; ++i) {
    for (int v = 0; v < kLatentDim; ++v) {
      char token[32];
      std::snprintf(token, sizeof token, v + 1 < kLatentDim ? "%.6f " : "%.6f\n", random_latent_value(7, i, v));
      text += token;
    }
  }
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr || std::fwrite(text.data(), 1, text.size(), file) != text.size() || std::fclose(file) != 0) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return 1;
  }
  const int64_t bytes = static_cast<int64_t>(text.size());
  const int cpus = available_cpus();
  std::vector<int> thread_counts;
  for (int t = 1; t < cpus; t *= 2) thread_counts.push_back(t);
  thread_counts.push_back(cpus);
  std::printf("latent text: %lld images, %.1f MB, %d CPUs\n", static_cast<long long>(images), bytes / 1e6, cpus);

  const std::vector<float> reference = read_all_latents(path);
  bool ok = true;
  for (int threads : thread_counts) {
    const std::vector<float> got = read_ranged(path, threads);
    if (got.size() != reference.size() || std::memcmp(got.data(), reference.data(), got.size() * sizeof(float)) != 0) {
      std::printf("check: %d threads read other values than the serial reader\n", threads);
      ok = false;
    }
  }
  if (!ok) {
    std::remove(path.c_str());
    return 1;
  }
  std::printf("check: OK (every thread count reads the serial reader's floats, bit for bit)\n");

  std::vector<const char*> tokens;  // NUL-terminated copies, as strtof needs
  std::string copy = text;
  for (char* p = std::strtok(copy.data(), " \n"); p != nullptr; p = std::strtok(nullptr, " \n")) tokens.push_back(p);
  float sink = 0;
  report("strtof alone, 1 thread (baseline)", images, bytes, best_of_3([&] {
           for (size_t i = 1; i < tokens.size(); ++i) sink += std::strtof(tokens[i], nullptr);
         }));
  report("serial streaming reader, 1 thread", images, bytes, best_of_3([&] { read_all_latents(path); }));
  for (int threads : thread_counts) {
    report("by ranges, map included, " + std::to_string(threads) + " thread" + (threads > 1 ? "s" : ""), images,
           bytes, best_of_3([&] { read_ranged(path, threads); }));
  }
  std::remove(path.c_str());
  std::printf("verdict: OK (%g)\n", sink != sink ? 0.0 : 1.0);
  return 0;
}
