// test_mapped_write.cpp: positioned writes through a shared mapping (files/mapped_write.hpp) give the
// bytes pwrite gives, from several threads into one file, touch nothing beside their range, fail
// over `ulimit -f` with EFBIG instead of a SIGBUS and write with pwrite where `ulimit -v` leaves no
// room for a mapping; OutputFiles with mapped writes keeps every byte and
// its clean failure; WriteWayTrial picks the faster way; sinks keep their bytes across the trial.
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
#include "files/image_sink.hpp"
#include "files/mapped_write.hpp"
#include "files/output_commit.hpp"
#include "files/output_files.hpp"
#include "files/output_format.hpp"
#include "tests/test_support.hpp"

using namespace facegen;
using namespace facegen_test;

namespace {

std::string random_bytes(std::mt19937_64& rng, size_t n) {
  std::string bytes(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t word = rng();
    std::memcpy(&bytes[i], &word, std::min<size_t>(8, n - i));
  }
  return bytes;
}

// A seed of its own for each run of a test, printed when the test fails (CAPTURE).
uint64_t fresh_seed() {
  std::random_device device;
  return uint64_t{device()} << 32 | device();
}

int open_rw(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  return fd;
}

}  // namespace

TEST_CASE("mapped_write: the bytes pwrite gives, at odd offsets and sizes, nothing written beside them") {
  TempDir dir;
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const std::string path = dir.file("f");
  for (int round = 0; round < 8; ++round) {
    // A poisoned file of odd size; one write somewhere in it, or past its end.
    const size_t size = 1 + rng() % (3 << 20);
    std::string expected(size, '\xAB');
    write_file(path, expected);
    const int64_t offset = static_cast<int64_t>(rng() % (size + 9000));
    const std::string data = random_bytes(rng, 1 + rng() % (9 << 20));  // up to 3 windows
    CAPTURE(size);
    CAPTURE(offset);
    CAPTURE(data.size());
    if (static_cast<size_t>(offset) + data.size() > expected.size()) expected.resize(offset + data.size(), '\0');
    expected.replace(static_cast<size_t>(offset), data.size(), data);
    const int fd = open_rw(path);
    int err = -1;
    const MappedWrite result = mapped_write(fd, offset, data.data(), static_cast<int64_t>(data.size()), &err);
    REQUIRE(::close(fd) == 0);
    if (result == MappedWrite::Unsupported) {
      MESSAGE("this file system cannot reserve space or map files: mapped writes fall back to pwrite here");
      return;
    }
    REQUIRE(result == MappedWrite::Done);
    CHECK(err == 0);
    CHECK(read_file(path) == expected);
  }
}

TEST_CASE("mapped_write: threads writing disjoint ranges of one file at once give one whole file") {
  TempDir dir;
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const int threads = 5;
  // Ranges of odd lengths, back to back, so neighbours share pages.
  std::vector<int64_t> starts = {0};
  for (int t = 0; t < threads; ++t) starts.push_back(starts.back() + 1 + static_cast<int64_t>(rng() % (1500000)));
  const std::string expected = random_bytes(rng, static_cast<size_t>(starts.back()));
  const std::string path = dir.file("one");
  write_file(path, std::string(static_cast<size_t>(starts.back()), '\x5C'));
  const int fd = open_rw(path);
  std::vector<MappedWrite> results(threads, MappedWrite::Failed);
  std::vector<int> errs(threads, -1);
  std::vector<std::thread> pool;
  for (int t = threads - 1; t >= 0; --t) {
    pool.emplace_back([&, t] {
      results[t] = mapped_write(fd, starts[t], expected.data() + starts[t], starts[t + 1] - starts[t], &errs[t]);
    });
  }
  for (auto& thread : pool) thread.join();
  REQUIRE(::close(fd) == 0);
  for (int t = 0; t < threads; ++t) {
    CAPTURE(t);
    CHECK(results[t] == MappedWrite::Done);
    CHECK(errs[t] == 0);
  }
  CHECK(read_file(path) == expected);
}

TEST_CASE("mapped_write: over ulimit -f it fails with EFBIG, without a SIGBUS") {
  TempDir dir;
  const std::string path = dir.file("limited");
  write_file(path, "");
  const int fd = open_rw(path);
  std::string data(3 << 20, 'x');
  int err = 0;
  MappedWrite result;
  {
    FileSizeLimit limit(2 << 20);
    result = mapped_write(fd, 0, data.data(), static_cast<int64_t>(data.size()), &err);
  }
  REQUIRE(::close(fd) == 0);
  if (result == MappedWrite::Unsupported) return;  // as above: pwrite's own EFBIG then
  CHECK(result == MappedWrite::Failed);
  CHECK(err == EFBIG);
}

namespace {

// While alive, the process's address space may grow by at most `spare` bytes (RLIMIT_AS), as under
// `ulimit -v`; the limit before is restored after.
class AddressSpaceLimit {
 public:
  explicit AddressSpaceLimit(int64_t spare) {
    REQUIRE(::getrlimit(RLIMIT_AS, &before_) == 0);
    long pages = 0;
    std::FILE* statm = std::fopen("/proc/self/statm", "r");
    REQUIRE(statm != nullptr);
    REQUIRE(std::fscanf(statm, "%ld", &pages) == 1);
    std::fclose(statm);
    rlimit limit = before_;
    limit.rlim_cur = static_cast<rlim_t>(pages * ::sysconf(_SC_PAGESIZE) + spare);
    REQUIRE(::setrlimit(RLIMIT_AS, &limit) == 0);
  }
  ~AddressSpaceLimit() { ::setrlimit(RLIMIT_AS, &before_); }

 private:
  rlimit before_{};
};

}  // namespace

TEST_CASE("mapped_write: with no address space for a window (ulimit -v) it writes with pwrite instead") {
  TempDir dir;
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const std::string path = dir.file("f");
  std::string expected(static_cast<size_t>(5 << 20) + 77, '\x3C');  // poisoned, the write inside it
  write_file(path, expected);
  const std::string data = random_bytes(rng, (9 << 20) + 1234);  // three windows
  const int64_t offset = 4096 + 13;
  expected.resize(static_cast<size_t>(offset) + data.size(), '\0');
  expected.replace(static_cast<size_t>(offset), data.size(), data);
  const int fd = open_rw(path);
  int err = -1;
  MappedWrite result;
  {
    AddressSpaceLimit limit(1 << 20);  // less than one 4 MiB window
    result = mapped_write(fd, offset, data.data(), static_cast<int64_t>(data.size()), &err);
  }
  REQUIRE(::close(fd) == 0);
  if (result == MappedWrite::Unsupported) return;  // no fallocate here: the caller's pwrite then
  CHECK(result == MappedWrite::Done);
  CHECK(err == 0);
  CHECK(read_file(path) == expected);
}

namespace {

// (n, 64, 64, 3) random values in (-1, 1).
std::vector<float> random_images(std::mt19937_64& rng, int64_t n) {
  std::vector<float> images(static_cast<size_t>(n) * kImageValues);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (float& v : images) v = value(rng);
  return images;
}

}  // namespace

TEST_CASE("OutputFiles with mapped writes: npy runs from several threads give the header and the raw floats") {
  TempDir dir;
  std::mt19937_64 rng(std::random_device{}());
  const int64_t n = 67 + static_cast<int64_t>(rng() % 40);  // 3.3-5.2 MB: runs of 1 MiB and more, over kMappedWriteMinBytes
  CAPTURE(n);
  const std::vector<float> images = random_images(rng, n);
  const OutputLayout layout(OutputFormat::Npy, dir.file("r"), n, OutputOptions{});
  {
    OutputFiles files(FileList{layout.file_count(), [&](size_t file) { return layout.file(file); }});
    files.use_mapped_writes(true);
    const int64_t cut[] = {0, 3, 3 + (n - 3) / 2, n};  // one run under 256 KiB (pwrite), two over (mapped)
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
        npy_header(n) + std::string(reinterpret_cast<const char*>(images.data()), images.size() * sizeof(float)));
}

TEST_CASE("OutputFiles with mapped writes: text past ulimit -f fails with the file named, and no file is left") {
  TempDir dir;
  std::mt19937_64 rng(std::random_device{}());
  const int64_t n = 40;  // 16 images a piece: about 1.5 MB each, mapped
  const std::vector<float> images = random_images(rng, n);
  const OutputLayout layout(OutputFormat::Text, dir.file("s"), n, OutputOptions{});
  RecordRun blocks;
  std::string message;
  {
    FileSizeLimit limit(2 << 20);
    message = user_error_of([&] {
      OutputFiles files(FileList{layout.file_count(), [&](size_t file) { return layout.file(file); }});
      files.use_mapped_writes(true);
      int64_t end = layout.text_data_offset();
      auto place = [&](int64_t bytes) {
        const int64_t at = end;
        end += bytes;
        return at;
      };
      for (int64_t first = 0; first < n; first += 16) {
        write_text_run(images.data() + first * kImageValues, std::min<int64_t>(16, n - first), 1, blocks, place, files);
      }
    });
  }
  CHECK(contains(message, "writing " + dir.file("s.txt") + " failed: File too large"));
  CHECK(dir.entries() == 0);
}

TEST_CASE("WriteWayTrial: pwrite, mapped, pwrite, mapped, then the better best; short runs are not trials") {
  const int64_t bytes = WriteWayTrial::kTrialBytes;
  WriteWayTrial slower_mapped;
  CHECK_FALSE(slower_mapped.mapped_now());
  slower_mapped.ran(bytes - 1, 0.001);  // too short to count
  CHECK_FALSE(slower_mapped.mapped_now());
  slower_mapped.ran(bytes, 0.030);  // pwrite, slowed by being first
  CHECK(slower_mapped.mapped_now());
  slower_mapped.ran(bytes, 0.020);  // mapped
  CHECK_FALSE(slower_mapped.mapped_now());
  slower_mapped.ran(bytes, 0.010);  // pwrite: its best
  CHECK(slower_mapped.mapped_now());
  CHECK_FALSE(slower_mapped.decided());
  slower_mapped.ran(bytes, 0.025);  // mapped: best 0.020, slower than pwrite's 0.010
  CHECK(slower_mapped.decided());
  CHECK_FALSE(slower_mapped.mapped_now());
  slower_mapped.ran(bytes, 0.001);  // later runs change nothing
  CHECK_FALSE(slower_mapped.mapped_now());

  WriteWayTrial faster_mapped;
  faster_mapped.ran(3 * bytes, 0.030);  // pwrite: one trial size per 10 ms
  faster_mapped.ran(bytes, 0.050);      // mapped, slow once
  faster_mapped.ran(bytes, 0.012);      // pwrite
  faster_mapped.ran(bytes, 0.005);      // mapped: the best rate of all
  CHECK(faster_mapped.decided());
  CHECK(faster_mapped.mapped_now());
}

TEST_CASE("WriteWayTrial: FACEGEN_TEST_WRITE_WAY fixes the way from the first run on") {
  REQUIRE(::setenv("FACEGEN_TEST_WRITE_WAY", "mapped", 1) == 0);
  WriteWayTrial mapped;
  REQUIRE(::setenv("FACEGEN_TEST_WRITE_WAY", "pwrite", 1) == 0);
  WriteWayTrial plain;
  REQUIRE(::unsetenv("FACEGEN_TEST_WRITE_WAY") == 0);
  for (int run = 0; run < 3; ++run) {
    CHECK(mapped.mapped_now());
    CHECK_FALSE(plain.mapped_now());
    CHECK(mapped.decided());
    mapped.ran(WriteWayTrial::kTrialBytes, run == 1 ? 1.0 : 0.001);
    plain.ran(WriteWayTrial::kTrialBytes, run == 0 ? 1.0 : 0.001);
  }
}

TEST_CASE("npy and text sinks: the trial's runs (pwrite, then mapped) and a short run after keep every byte") {
  TempDir dir;
  std::mt19937_64 rng(std::random_device{}());
  // Runs of at least 8 MiB, each a trial: 171 images of npy, 91 of text; pwrite, mapped, then a short run.
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
        npy_header(n) + std::string(reinterpret_cast<const char*>(images.data()), images.size() * sizeof(float)));
  std::string expected = std::to_string(text_n) + "\n";
  std::vector<char> line(kMaxImageTextBytes);
  for (int64_t k = 0; k < text_n; ++k) {
    expected.append(line.data(), format_image_text(images.data() + k * kImageValues, line.data()));
  }
  CHECK(read_file(dir.file("r.txt")) == expected);
}
