// test_output_files.cpp: OutputFiles' positioned writes (pwrite_fully) from several threads give the
// header and every byte, a write past `ulimit -f` fails with the file named and leaves no file, and
// sinks keep every byte across long and short runs.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/model_shape.hpp"
#include "engine/image_sink.hpp"
#include "commit/output_commit.hpp"
#include "engine/output_files.hpp"
#include "formats/output_format.hpp"
#include "tests/test_support.hpp"

using namespace facegen;
using namespace facegen_test;

namespace {

// (n, 64, 64, 3) random values in (-1, 1).
std::vector<float> random_images(std::mt19937_64& rng, int64_t n) {
  std::vector<float> images(static_cast<size_t>(n) * kImageValues);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (float& v : images) v = value(rng);
  return images;
}

}  // namespace

TEST_CASE("OutputFiles: npy runs from several threads give the header and the raw floats") {
  TempDir dir;
  std::mt19937_64 rng(std::random_device{}());
  const int64_t n = 67 + static_cast<int64_t>(rng() % 40);  // 3.3-5.2 MB in three runs
  CAPTURE(n);
  const std::vector<float> images = random_images(rng, n);
  const OutputLayout layout(OutputFormat::Npy, dir.file("r"), n, OutputOptions{});
  {
    OutputFiles files(FileList{layout.file_count(), [&](size_t file) { return layout.file(file); }});
          const int64_t cut[] = {0, 3, 3 + (n - 3) / 2, n};  // runs of three sizes, written at once
    std::vector<std::thread> pool;
    for (int t = 0; t < 3; ++t) {
      pool.emplace_back([&, t] {
        layout.write_run(images.data() + cut[t] * kImageValues, cut[t], cut[t + 1] - cut[t], files);
      });
    }
    for (auto& thread : pool) thread.join();
    files.finish();
    commit_all_or_nothing(files.renames());
    files.mark_committed();
  }
  CHECK(read_file(dir.file("r.npy")) ==
        npy_header(n, 3, 64) + std::string(reinterpret_cast<const char*>(images.data()), images.size() * sizeof(float)));
}

TEST_CASE("OutputFiles: text past ulimit -f fails with the file named, and no file is left") {
  TempDir dir;
  std::mt19937_64 rng(std::random_device{}());
  const int64_t n = 40;  // 16 images a piece: about 1.5 MB each
  const std::vector<float> images = random_images(rng, n);
  const OutputLayout layout(OutputFormat::Text, dir.file("s"), n, OutputOptions{});
  RecordRun blocks;
  std::string message;
  {
    FileSizeLimit limit(2 << 20);
    message = user_error_of([&] {
      OutputFiles files(FileList{layout.file_count(), [&](size_t file) { return layout.file(file); }});
              int64_t end = layout.text_data_offset();
      auto place = [&](int64_t bytes) {
        const int64_t at = end;
        end += bytes;
        return at;
      };
      for (int64_t first = 0; first < n; first += 16) {
        write_text_run(images.data() + first * kImageValues, std::min<int64_t>(16, n - first), 1, blocks, place, files,
                       3, 64);
      }
    });
  }
  CHECK(contains(message, "writing " + dir.file("s.txt") + " failed: File too large"));
  CHECK(dir.entries() == 0);
}

TEST_CASE("npy and text sinks: long runs and a short run after keep every byte") {
  TempDir dir;
  std::mt19937_64 rng(std::random_device{}());
  // Runs of at least 8 MiB (180 images of npy, 95 of text), then a short run.
  const int64_t npy_run = 180, text_run = 95;
  const int64_t n = 2 * npy_run + 1 + static_cast<int64_t>(rng() % 50);
  const int64_t text_n = 2 * text_run + 1 + static_cast<int64_t>(rng() % 20);
  CAPTURE(n);
  CAPTURE(text_n);
  const std::vector<float> images = random_images(rng, n);
  SinkOptions options;
  options.threads = 3;
  auto npy = make_sink(OutputFormat::Npy, dir.file("r"), n, options);
  auto text = make_sink(OutputFormat::Text, dir.file("r"), text_n, options);
  for (int64_t first = 0; first < n; first += npy_run)
    npy->append(images.data() + first * kImageValues, first, std::min(npy_run, n - first));
  for (int64_t first = 0; first < text_n; first += text_run)
    text->append(images.data() + first * kImageValues, first, std::min(text_run, text_n - first));
  commit_sinks({npy.get(), text.get()});
  CHECK(read_file(dir.file("r.npy")) ==
        npy_header(n, 3, 64) + std::string(reinterpret_cast<const char*>(images.data()), images.size() * sizeof(float)));
  std::string expected = std::to_string(text_n) + "\n";
  std::vector<char> line(max_image_text_bytes(kImageValues));
  for (int64_t k = 0; k < text_n; ++k) {
    expected.append(line.data(), format_image_text(images.data() + k * kImageValues, line.data(), kImageValues));
  }
  CHECK(read_file(dir.file("r.txt")) == expected);
}
