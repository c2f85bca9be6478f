// bench_io.cpp: `make bench-io`, the output writers in MB/s and images/s on this machine's CPU.
//
// Images come from the synthetic backend (smooth values in (-1, 1), as compressible as a picture), so
// no model or GPU is needed. Text is checked before it is timed: our formatter's bytes must equal
// fprintf's on every benchmarked image ("text check: OK"), then fprintf("%.4f ") is the baseline
// beside it, one thread each (per-core speed), then the text sink on every thread. The file writers
// write real files into a temporary directory under /tmp (or $BENCH_DIR), commit included (fsync).
//
//   build/facegen-bench-io [--images N]    (N: images per file writer, default 2048)
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "generator/backend.hpp"
#include "engine/image_sink.hpp"
#include "formats/png_encoder.hpp"
#include "generator/network.hpp"
#include "common/threads.hpp"

using namespace facegen;

namespace {

using Clock = std::chrono::steady_clock;

double time_it(const std::function<void()>& body) {
  const auto start = Clock::now();
  body();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void report(const char* name, int64_t images, int64_t bytes, double seconds, const char* note = "") {
  std::printf("%-34s %8lld images %9.1f MB %8.3f s %10.1f MB/s %10.0f images/s  %s\n", name,
              static_cast<long long>(images), bytes / 1e6, seconds, bytes / 1e6 / seconds, images / seconds, note);
}

int64_t tree_bytes(const std::string& path) {
  int64_t total = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(path))
    if (entry.is_regular_file()) total += static_cast<int64_t>(entry.file_size());
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = 2048;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--images") == 0) n = std::atoll(argv[i + 1]);
  const int threads = resolve_threads(0);

  // (256, 64, 64, 3) distinct images, reused cyclically for larger runs.
  constexpr int64_t kDistinct = 256;
  std::vector<float> latents(kDistinct * kLatentDim);
  uint64_t state = 12345;
  for (float& z : latents) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    z = static_cast<float>(static_cast<double>(state >> 11) * 0x1.0p-53 * 4.0 - 2.0);
  }
  std::vector<float> images(kDistinct * kImageValues);
  BackendOptions options;
  make_synthetic_backend(options)->generate(latents.data(), kDistinct, images.data());
  auto image = [&](int64_t k) { return images.data() + (k % kDistinct) * kImageValues; };

  // --- text: correctness first, then fprintf against ours on one core ---
  std::vector<char> line(max_image_text_bytes(kImageValues));
  int64_t mismatched = 0;
  {
    std::FILE* memory = nullptr;
    char* reference = nullptr;
    size_t reference_size = 0;
    for (int64_t k = 0; k < kDistinct; ++k) {
      memory = open_memstream(&reference, &reference_size);
      for (int i = 0; i < kImageValues; ++i) std::fprintf(memory, "%.4f ", static_cast<double>(image(k)[i]));
      std::fputc('\n', memory);
      std::fclose(memory);
      const size_t bytes = format_image_text(image(k), line.data(), kImageValues);
      if (bytes != reference_size || std::memcmp(line.data(), reference, bytes) != 0) ++mismatched;
      std::free(reference);
    }
  }
  std::printf("text check: %s (%lld images, %lld values, ours against fprintf byte for byte)\n\n",
              mismatched == 0 ? "OK" : "MISMATCH", static_cast<long long>(kDistinct),
              static_cast<long long>(kDistinct * kImageValues));
  if (mismatched != 0) return 1;
  std::printf("machine: %u hardware threads\n", std::thread::hardware_concurrency());
  std::printf("%-34s %8s %16s %10s %15s %17s\n", "writer", "", "", "", "", "");

  std::FILE* null = std::fopen("/dev/null", "wb");
  const int64_t printf_images = std::max<int64_t>(16, n / 16);
  int64_t printf_bytes = 0;
  const double printf_seconds = time_it([&] {
    for (int64_t k = 0; k < printf_images; ++k) {
      for (int i = 0; i < kImageValues; ++i) printf_bytes += std::fprintf(null, "%.4f ", static_cast<double>(image(k)[i]));
      printf_bytes += std::fprintf(null, "\n");
    }
  });
  report("text, fprintf, 1 thread", printf_images, printf_bytes, printf_seconds, "(to /dev/null: formatting only)");
  int64_t ours_bytes = 0;
  const double ours_seconds = time_it([&] {
    for (int64_t k = 0; k < n; ++k) {
      const size_t bytes = format_image_text(image(k), line.data(), kImageValues);
      std::fwrite(line.data(), 1, bytes, null);
      ours_bytes += static_cast<int64_t>(bytes);
    }
  });
  char note[96];
  std::snprintf(note, sizeof note, "(to /dev/null: formatting only) %.1fx fprintf per core",
                (ours_bytes / ours_seconds) / (printf_bytes / printf_seconds));
  report("text, ours, 1 thread", n, ours_bytes, ours_seconds, note);
  int64_t parallel_bytes = 0;
  std::vector<std::vector<char>> lines(threads, std::vector<char>(max_image_text_bytes(kImageValues)));
  const double parallel_seconds = time_it([&] {
    std::vector<int64_t> per_thread(threads, 0);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        for (int64_t k = t; k < n; k += threads) per_thread[t] += format_image_text(image(k), lines[t].data(), kImageValues);
      });
    for (auto& thread : pool) thread.join();
    for (int64_t b : per_thread) parallel_bytes += b;
  });
  std::snprintf(note, sizeof note, "(formatting only, %d threads)", threads);
  report("text, ours, all threads", n, parallel_bytes, parallel_seconds, note);
  std::fclose(null);

  // --- the sinks, writing real files ---
  const char* base = std::getenv("BENCH_DIR") ? std::getenv("BENCH_DIR") : "/tmp";
  std::string dir = std::string(base) + "/facegen-bench-io-XXXXXX";
  if (::mkdtemp(&dir[0]) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  constexpr int64_t kChunk = 256;
  std::vector<float> chunk(kChunk * kImageValues);  // (256, 64, 64, 3): the distinct images
  std::memcpy(chunk.data(), images.data(), chunk.size() * sizeof(float));
  SinkOptions sink_options;
  auto run_sink = [&](const char* name, std::unique_ptr<ImageSink> sink, const std::string& path, const char* extra) {
    const double seconds = time_it([&] {
      for (int64_t first = 0; first < n; first += kChunk) sink->append(chunk.data(), first, std::min(kChunk, n - first));
      sink->commit();
    });
    report(name, n, sink->bytes_written(), seconds, extra);
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
    (void)tree_bytes;
  };
  std::snprintf(note, sizeof note, "(%d threads, ordered, fsync)", threads);
  run_sink("text sink (PREFIX.txt)", make_text_sink(dir + "/t.txt", n, sink_options), dir + "/t.txt", note);
  SinkOptions one_thread;
  one_thread.threads = 1;
  run_sink("text sink, 1 thread", make_text_sink(dir + "/t.txt", n, one_thread), dir + "/t.txt", "(fsync)");
  run_sink("npy (PREFIX.npy)", make_npy_sink(dir + "/n.npy", n), dir + "/n.npy", "(fsync)");
  run_sink("bmp mosaic (PREFIX.bmp)", make_mosaic_sink(MosaicEncoding::Bmp, dir + "/m", n, sink_options),
           dir + "/m.bmp", "(one file)");
  std::snprintf(note, sizeof note, "(%d threads, --png-level %d)", threads, kDefaultPngLevel);
  run_sink("png folder (PREFIX/000000.png)", make_png_folder_sink(dir + "/p", n, sink_options), dir + "/p", note);
  run_sink("png folder, 1 thread", make_png_folder_sink(dir + "/p", n, one_thread), dir + "/p", "");
  run_sink("png mosaic (PREFIX.png)", make_mosaic_sink(MosaicEncoding::Png, dir + "/m", n, sink_options),
           dir + "/m.png", note);
  std::filesystem::remove_all(dir);
  return 0;
}
