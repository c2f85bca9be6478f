// test_outputs.cpp: the writers added for large runs: the text sink on many threads, the mosaic's
// splitting rule, PNG files (decoded back with stb_image), the output stage's order and errors, and
// the progress bar's terminal check.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <mutex>
#include <utility>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wunused-function"
#define STB_IMAGE_IMPLEMENTATION
#include <stb_image.h>
#pragma GCC diagnostic pop

#include "common/errors.hpp"
#include "engine/image_sink.hpp"
#include "commit/output_commit.hpp"
#include "formats/output_format.hpp"
#include "generator/network.hpp"
#include "engine/output_engine.hpp"
#include "run/progress.hpp"
#include "run/summary.hpp"
#include "tests/test_support.hpp"

using namespace facegen;
using namespace facegen_test;

namespace {

// (n, 64, 64, 3) seeded values in [low, high).
std::vector<float> some_images(int64_t n, uint64_t seed, float low = -1.05f, float high = 1.05f) {
  std::vector<float> images(static_cast<size_t>(n) * kImageValues);
  for (float& v : images) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    v = low + (high - low) * static_cast<float>(seed >> 40) * 0x1.0p-24f;
  }
  return images;
}

void write_in_runs(ImageSink& sink, const std::vector<float>& images, int64_t n, int64_t run) {
  for (int64_t first = 0; first < n; first += run)
    sink.append(images.data() + first * kImageValues, first, std::min(run, n - first));
}

// The single-file BMP of images [first, first + count), the format test_sinks.cpp checks byte for byte.
std::string single_bmp(const TempDir& dir, const std::vector<float>& images, int64_t first, int64_t count) {
  const std::string path = dir.file("reference.bmp");
  {
    auto sink = make_bmp_mosaic_sink(path, count);
    sink->append(images.data() + first * kImageValues, 0, count);
    sink->commit();
  }
  std::string bytes = read_file(path);
  std::filesystem::remove(path);
  return bytes;
}

// A file's pages in the page cache that are dirty or under writeback (cachestat, Linux 6.5), or -1
// where the kernel or file system cannot say.
int64_t unsynced_pages(const std::string& path) {
  struct Range {
    uint64_t offset, length;
  } range = {0, 0};  // 0: to the end of the file
  struct Stat {
    uint64_t cache, dirty, writeback, evicted, recently_evicted;
  } stat = {};
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  const long got = ::syscall(451 /* __NR_cachestat */, fd, &range, &stat, 0);
  ::close(fd);
  return got == 0 ? static_cast<int64_t>(stat.dirty + stat.writeback) : -1;
}

}  // namespace

TEST_CASE("text sink: the same bytes on 1, 2 and 5 threads, for runs that are not multiples of a block") {
  TempDir dir;
  const int64_t n = 37;
  const std::vector<float> images = some_images(n, 11);
  std::string expected = "37\n";
  char text[64];
  for (int64_t k = 0; k < n; ++k) {
    for (int i = 0; i < kImageValues; ++i) {
      std::snprintf(text, sizeof text, "%.4f ", static_cast<double>(images[k * kImageValues + i]));
      expected += text;
    }
    expected += "\n";
  }
  for (int threads : {1, 2, 5}) {
    CAPTURE(threads);
    SinkOptions options;
    options.threads = threads;
    const std::string path = dir.file("t" + std::to_string(threads) + ".txt");
    auto sink = make_text_sink(path, n, options);
    write_in_runs(*sink, images, n, 13);
    sink->commit();
    CHECK(sink->bytes_written() == static_cast<int64_t>(expected.size()));
    CHECK(read_file(path) == expected);
  }
}

TEST_CASE("mosaic: the splitting rule and its file names") {
  auto paths = [](const std::string& prefix, const char* extension, int64_t n, int tiles) {
    std::vector<std::string> all;
    const int64_t files = mosaic_file_count(n, tiles);
    for (int64_t k = 0; k < files; ++k) all.push_back(mosaic_path(prefix, extension, k, files));
    return all;
  };
  CHECK(paths("out/r", "bmp", 16384, 128) == std::vector<std::string>{"out/r.bmp"});
  CHECK(paths("r", "bmp", 1, 1) == std::vector<std::string>{"r.bmp"});
  CHECK(paths("r", "png", 5, 2) == std::vector<std::string>{"r-0001.png", "r-0002.png"});
  const auto many = paths("r", "bmp", 100000, 128);  // 16,384 per file
  REQUIRE(many.size() == 7);
  CHECK(many.back() == "r-0007.bmp");
  CHECK(mosaic_file_count(20000, 1) == 20000);
  CHECK(mosaic_path("r", "bmp", 9999, 20000) == "r-10000.bmp");
  CHECK(mosaic_file_count(16385, 0) == 1);
}

TEST_CASE("mosaic: a layout of N = 10^12 computes its files on demand, whatever their number") {
  OutputOptions options;
  options.mosaic_tiles = 1;
  std::string notice;
  options.on_notice = [&](const std::string& text) { notice = text; };
  const int64_t n = 1000000000000;
  const OutputLayout bmp(OutputFormat::Bmp, "r", n, options);
  CHECK(bmp.file_count() == static_cast<size_t>(n));
  CHECK(bmp.file(static_cast<size_t>(n - 1)).path == "r-1000000000000.bmp");
  CHECK(bmp.file(static_cast<size_t>(n - 1)).first == n - 1);
  CHECK(bmp.describe() == "r-0001.bmp ... r-1000000000000.bmp (1000000000000 files)");
  CHECK(bmp.known_bytes() == n * (54 + 64 * 64 * 3));
  CHECK(notice.find("writing 1,000,000,000,000 files") != std::string::npos);
  CHECK(bmp.files_of(41, 3) == std::pair<size_t, size_t>{41, 44});
  options.mosaic_tiles = 128;
  const OutputLayout png(OutputFormat::MosaicPng, "r", n, options);
  const size_t last = png.file_count() - 1;
  CHECK(png.file(last).kind == OutputFile::Kind::Encoded);
  CHECK(png.file(last - 1).kind == OutputFile::Kind::Pixels);
  CHECK(png.file(last).count == n % 16384);
  CHECK(png.files_of(16383, 2) == std::pair<size_t, size_t>{0, 4});
  CHECK_THROWS_AS(png.file(last + 1), std::out_of_range);
}

TEST_CASE("mosaic: N at the limit is the old single BMP; above it, numbered files of at most the limit") {
  TempDir dir;
  const std::vector<float> images = some_images(11, 5);
  SinkOptions options;
  options.mosaic_tiles = 2;  // 4 images per file
  std::vector<std::string> notices;
  options.on_notice = [&](const std::string& text) { notices.push_back(text); };

  {
    auto sink = make_mosaic_sink(MosaicEncoding::Bmp, dir.file("four"), 4, options);
    write_in_runs(*sink, images, 4, 3);
    sink->commit();
  }
  CHECK(notices.empty());
  CHECK(read_file(dir.file("four.bmp")) == single_bmp(dir, images, 0, 4));

  {
    auto sink = make_mosaic_sink(MosaicEncoding::Bmp, dir.file("eleven"), 11, options);
    CHECK(sink->path() == dir.file("eleven-0001.bmp") + " ... " + dir.file("eleven-0003.bmp") + " (3 files)");
    write_in_runs(*sink, images, 11, 3);
    CHECK(!std::filesystem::exists(dir.file("eleven-0001.bmp")));  // renamed only at commit
    sink->commit();
  }
  REQUIRE(notices.size() == 1);
  CHECK(notices[0].find("11 images") != std::string::npos);
  CHECK(notices[0].find("3 files") != std::string::npos);
  CHECK(read_file(dir.file("eleven-0001.bmp")) == single_bmp(dir, images, 0, 4));
  CHECK(read_file(dir.file("eleven-0002.bmp")) == single_bmp(dir, images, 4, 4));
  CHECK(read_file(dir.file("eleven-0003.bmp")) == single_bmp(dir, images, 8, 3));  // 2x2 tiles, one black
  CHECK(dir.names() == std::vector<std::string>{"eleven-0001.bmp", "eleven-0002.bmp", "eleven-0003.bmp", "four.bmp"});

  {  // not committed: no file, not even the ones already encoded
    auto sink = make_mosaic_sink(MosaicEncoding::Bmp, dir.file("failed"), 11, options);
    write_in_runs(*sink, images, 9, 3);
  }
  CHECK(dir.names().size() == 4);

  options.mosaic_tiles = kMaxMosaicTiles + 1;
  CHECK_THROWS_AS(make_mosaic_sink(MosaicEncoding::Bmp, dir.file("x"), 1, options), UserError);
}

TEST_CASE("mosaic split into many files: every file synced by commit, with one syncfs instead of an fsync each") {
  TempDir dir;
  // Where the page cache shows a file written and not synced as dirty, it must show none of the
  // committed mosaic files so; elsewhere (an older kernel, a file system without dirty pages) the
  // check cannot be made.
  const std::vector<float> images = some_images(37, 21);
  write_file(dir.file("control"), images.data(), images.size() * sizeof(float));
  const int64_t control = unsynced_pages(dir.file("control"));
  std::filesystem::remove(dir.file("control"));
  SinkOptions options;
  options.mosaic_tiles = 2;  // 10 files of 4, 4, ..., 1 images
  options.grid_padding = 3;
  for (MosaicEncoding encoding : {MosaicEncoding::Bmp, MosaicEncoding::Png}) {
    auto sink = make_mosaic_sink(encoding, dir.file("m"), 37, options);
    write_in_runs(*sink, images, 37, 5);
    sink->commit();
    sink.reset();
    REQUIRE(dir.entries() == 10);
    for (const std::string& name : dir.names()) {
      if (control > 0) CHECK_MESSAGE(unsynced_pages(dir.file(name)) == 0, name);
      std::filesystem::remove(dir.file(name));
    }
  }
  if (control <= 0) MESSAGE("cachestat cannot see unsynced pages here: the sync of split mosaics is not checked");
}

TEST_CASE("mosaic: a numbered file is created by its first image, not before") {
  TempDir dir;
  const std::vector<float> images = some_images(11, 9);
  SinkOptions options;
  options.mosaic_tiles = 2;  // files of 4, 4 and 3 images
  for (MosaicEncoding encoding : {MosaicEncoding::Bmp, MosaicEncoding::Png}) {
    auto sink = make_mosaic_sink(encoding, dir.file("m"), 11, options);
    CHECK(dir.entries() == 1);  // the first file (its pixels, for a PNG), so that a bad directory fails early
    sink->append(images.data(), 0, 4);
    CHECK(dir.entries() == 1);
    sink->append(images.data() + 4 * kImageValues, 4, 1);  // the second file's first image
    CHECK(dir.entries() == 2);
    sink->append(images.data() + 5 * kImageValues, 5, 6);
    CHECK(dir.entries() == 3);
    sink->commit();
    sink.reset();
    CHECK(dir.entries() == 3);  // the three mosaics; a PNG's scratch pixel files went with the sink
    for (const std::string& name : dir.names()) std::filesystem::remove(dir.file(name));
  }
}

TEST_CASE("png: folder of one PNG per image and the PNG mosaic decode to the mosaic's bytes") {
  TempDir dir;
  const int64_t n = 5;
  const std::vector<float> images = some_images(n, 21);
  for (int threads : {1, 3}) {
    CAPTURE(threads);
    SinkOptions options;
    options.threads = threads;
    options.png_level = threads == 1 ? 0 : 9;  // stored, and compressed with filtered rows
    const std::string folder = dir.file("p");
    {
      auto sink = make_png_folder_sink(folder, n, options);
      write_in_runs(*sink, images, n, 2);
      CHECK(!std::filesystem::exists(folder));
      sink->commit();
      CHECK(sink->bytes_written() > 0);
    }
    CHECK(dir.names() == std::vector<std::string>{"p"});  // the temporary folder is gone
    for (int64_t k = 0; k < n; ++k) {
      CAPTURE(k);
      int w = 0, h = 0, c = 0;
      const std::string path = folder + "/" + png_file_name(k, n, SampleFacts());
      unsigned char* pixels = stbi_load(path.c_str(), &w, &h, &c, 3);
      REQUIRE(pixels != nullptr);
      CHECK((w == 64 && h == 64 && c == 3));
      int wrong = 0;
      for (int i = 0; i < kImageValues; ++i) wrong += pixels[i] != channel_to_byte(images[k * kImageValues + i]);
      CHECK(wrong == 0);
      stbi_image_free(pixels);
    }
    std::filesystem::remove_all(folder);
  }
  CHECK(png_file_name(42, 10, SampleFacts()) == "000042.png");
  CHECK(png_file_name(42, 2000000, SampleFacts()) == "0000042.png");

  // The BMP of the same mosaic holds the same pixels, bottom-up and BGR.
  const std::string bmp = single_bmp(dir, images, 0, n);
  for (int level : {0, 1, 12}) {
    CAPTURE(level);
    SinkOptions options;
    options.png_level = level;
    {
      auto sink = make_mosaic_sink(MosaicEncoding::Png, dir.file("m"), n, options);
      write_in_runs(*sink, images, n, 2);
      sink->commit();
    }
    int w = 0, h = 0, c = 0;
    unsigned char* pixels = stbi_load(dir.file("m.png").c_str(), &w, &h, &c, 3);
    REQUIRE(pixels != nullptr);
    CHECK((w == 192 && h == 192));
    int wrong = 0;
    for (int y = 0; y < 192; ++y)
      for (int x = 0; x < 192; ++x)
        for (int ch = 0; ch < 3; ++ch)
          wrong += pixels[(y * 192 + x) * 3 + ch] !=
                   static_cast<unsigned char>(bmp[54 + ((191 - y) * 192 + x) * 3 + 2 - ch]);
    CHECK(wrong == 0);
    stbi_image_free(pixels);
  }
}

TEST_CASE("png folder: an older folder is replaced only at commit; a file in the way is refused") {
  TempDir dir;
  const std::string folder = dir.file("p");
  std::filesystem::create_directory(folder);
  write_file(folder + "/000007.png", std::string("old png"));
  const std::vector<float> images = some_images(1, 3);
  {
    auto sink = make_png_folder_sink(folder, 1);
    sink->append(images.data(), 0, 1);
  }
  CHECK(read_file(folder + "/000007.png") == "old png");  // not committed: the old folder is untouched
  {
    auto sink = make_png_folder_sink(folder, 1);
    sink->append(images.data(), 0, 1);
    sink->commit();
  }
  CHECK(!std::filesystem::exists(folder + "/000007.png"));
  CHECK(std::filesystem::exists(folder + "/000000.png"));
  CHECK(dir.names() == std::vector<std::string>{"p"});
  std::ofstream(dir.file("f")) << "x";
  CHECK_THROWS_AS(make_png_folder_sink(dir.file("f"), 1), UserError);
  CHECK_THROWS_AS(make_png_folder_sink(dir.file("nodir/p"), 1), UserError);
}

TEST_CASE("png folder: an old folder that something else came into meanwhile is not replaced") {
  for (const char* foreign : {"notes.txt", "sub/", "link", "000001.png/"}) {
    CAPTURE(foreign);
    TempDir dir;
    const std::string folder = dir.file("p");
    std::filesystem::create_directory(folder);
    write_file(folder + "/000000.png", std::string("old png"));
    const std::vector<float> images = some_images(1, 3);
    auto sink = make_png_folder_sink(folder, 1);
    sink->append(images.data(), 0, 1);
    const std::string name = foreign;
    if (name.back() == '/') {
      std::filesystem::create_directory(folder + "/" + name);
      write_file(folder + "/" + name + "kept", std::string("mine"));
    } else if (name == "link") {
      std::filesystem::create_symlink(dir.file("p"), folder + "/link");
    } else {
      write_file(folder + "/" + name, std::string("mine"));
    }
    const std::string message = user_error_of([&] { sink->commit(); });
    CHECK(contains(message, "cannot write the PNG folder " + folder + ": it holds "));
    CHECK(contains(message, "(found at the commit; no output was replaced)"));
    CHECK(read_file(folder + "/000000.png") == "old png");
    if (name.back() == '/') CHECK(read_file(folder + "/" + name + "kept") == "mine");
  }
}

namespace {

// Records what it is given; fails on request.
struct RecordingSink : ImageSink {
  std::vector<float>* seen;
  int64_t fail_at;
  bool* was_committed;
  RecordingSink(std::vector<float>* s, int64_t f, bool* c) : seen(s), fail_at(f), was_committed(c) {}
  using ImageSink::append;
  int image_channels() const override { return 3; }
  int image_size() const override { return 64; }
  void append(const ImageRun& images, int64_t first, int64_t count) override {
    if (first >= fail_at) throw UserError("disk full at " + std::to_string(first));
    for (int64_t k = 0; k < count; ++k) seen->push_back(images.values()[k * kImageValues]);
  }
  std::vector<PendingRename> finish() override { return {}; }
  void committed() override { *was_committed = true; }
  std::string path() const override { return "recording"; }
};

}  // namespace

TEST_CASE("output engine: an ordered sink gets its pieces in order through a ring of buffers; errors come back") {
  std::vector<float> seen;
  bool committed = false;
  RecordingSink sink(&seen, 1 << 30, &committed);
  int64_t written = 0;
  std::mutex written_mutex;
  EngineOptions options;
  options.piece_images = 3;
  options.buffers = 4;
  options.on_written = [&](int64_t, int64_t count) {
    std::lock_guard<std::mutex> lock(written_mutex);
    written += count;
  };
  {
    OutputEngine engine({&sink}, options);
    for (int64_t first = 0; first < 20; first += 3) {
      float* buffer = static_cast<float*>(engine.acquire().images);
      const int64_t count = std::min<int64_t>(3, 20 - first);
      for (int64_t k = 0; k < count; ++k) buffer[k * kImageValues] = static_cast<float>(first + k);
      engine.submit(buffer, first, count);
    }
    engine.finish();
  }
  sink.commit();
  CHECK(committed);
  CHECK(written == 20);
  REQUIRE(seen.size() == 20);
  for (int k = 0; k < 20; ++k) CHECK(seen[k] == static_cast<float>(k));

  std::vector<float> seen2;
  bool committed2 = false;
  RecordingSink failing(&seen2, 6, &committed2);
  options.on_written = nullptr;
  OutputEngine broken({&failing}, options);
  bool thrown = false;
  try {
    for (int64_t first = 0; first < 30; first += 3) broken.submit(broken.acquire().images, first, 3);
    broken.finish();
  } catch (const UserError& e) {
    thrown = std::string(e.what()) == "disk full at 6";
  }
  CHECK(thrown);
  CHECK(!committed2);
}

TEST_CASE("progress bar: only on a terminal and not quiet; one line with rate and ETA") {
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  CHECK(!progress_wanted(pipe_fds[1], false));
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  if (master >= 0 && ::grantpt(master) == 0 && ::unlockpt(master) == 0) {
    const int terminal = ::open(::ptsname(master), O_RDWR | O_NOCTTY);
    REQUIRE(terminal >= 0);
    CHECK(progress_wanted(terminal, false));
    CHECK(!progress_wanted(terminal, true));
    ::close(terminal);
  } else {
    MESSAGE("no pseudo-terminal here; the terminal half of this check is skipped");
  }
  if (master >= 0) ::close(master);

  CHECK(progress_line(250, 1000, 2.0, 10) == "[##        ] 250/1000 images  125 images/s  ETA 0:00:06");
  CHECK(progress_line(1000, 1000, 4.0, 10) == "[##########] 1000/1000 images  250 images/s");

  CHECK(progress_log_line(250, 1000, 2.0) == "progress 250/1000 images (25%), 125 images/s, 0:00:06 left, 0:00:02 elapsed");
  CHECK(progress_style_for(pipe_fds[1], true) == ProgressStyle::None);

  // Off (--quiet), it writes nothing at all, however long it lives.
  std::FILE* out = std::tmpfile();
  {
    ProgressDisplay off(out, ProgressOptions{ProgressStyle::None, 0.1}, 10, [] { return int64_t{5}; });
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  CHECK(std::ftell(out) == 0);
  std::fclose(out);
}

TEST_CASE("progress display: by time, not by update; lines where stderr is a log, a bar on a terminal") {
  std::atomic<int64_t> done{0};
  std::FILE* out = std::tmpfile();
  ProgressDisplay lines(out, ProgressOptions{ProgressStyle::Lines, 0.1}, 1000, [&done] { return done.load(); });
  done = 400;  // the counter moves between draws; nobody calls the display
  std::this_thread::sleep_for(std::chrono::milliseconds(450));
  lines.finish();
  const int drawn = lines.draws();  // ticks at 0.1, 0.2, 0.3, 0.4 s; a starved thread may miss one
  CHECK(drawn >= 2);
  CHECK(drawn <= 4);
  std::rewind(out);
  char line[256];
  REQUIRE(std::fgets(line, sizeof line, out) != nullptr);
  CHECK(std::string(line).rfind("facegen: progress 400/1000 images (40%)", 0) == 0);
  std::fclose(out);

  // A bar: redrawn in place, cleared at the end; a display finished before its first tick draws nothing.
  out = std::tmpfile();
  ProgressDisplay bar(out, ProgressOptions{ProgressStyle::Bar, 10}, 1000, [&done] { return done.load(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(450));
  bar.finish();
  CHECK(bar.draws() >= 1);
  std::rewind(out);
  std::string text;
  for (int c; (c = std::fgetc(out)) != EOF;) text += static_cast<char>(c);
  CHECK(text.find('\n') == std::string::npos);
  CHECK(text.find("\r[############") != std::string::npos);
  CHECK(text.substr(text.size() - 4) == "\r\033[K");
  std::fclose(out);
  out = std::tmpfile();
  ProgressDisplay early(out, ProgressOptions{ProgressStyle::Lines, 5}, 1000, [&done] { return done.load(); });
  early.finish();
  CHECK(early.draws() == 0);
  CHECK(std::ftell(out) == 0);
  std::fclose(out);
}

TEST_CASE("summary paths are shown normalised") {
  CHECK(normal_path("build/../models/facegen-fashion.bin") == "models/facegen-fashion.bin");
  CHECK(normal_path("/opt/fg/bin/../share/facegen/./models//x.bin") == "/opt/fg/share/facegen/models/x.bin");
  CHECK(normal_path("outputs//tmp/abs.txt") == "outputs/tmp/abs.txt");
  CHECK(normal_path("../a/b/..") == "../a");
  CHECK(normal_path("/..") == "/");
  CHECK(normal_path("a/..") == ".");
}

// --- each format's definition, driven as MPI ranks drive it: runs in any order, at their offsets ---

namespace {

// A driver that keeps every file in memory: what the layout writes, where it writes it.
struct MemoryFiles : FileWriter {
  std::vector<std::string> bytes;
  std::vector<std::string> temps;
  explicit MemoryFiles(const OutputLayout& layout) {
    for (size_t f = 0; f < layout.file_count(); ++f) {
      const OutputFile file = layout.file(f);
      std::string content = file.header;
      if (file.size > 0) content.resize(static_cast<size_t>(file.size), '\0');
      bytes.push_back(content);
      temps.push_back("");
    }
  }
  std::mutex mutex;  // write_at comes from several threads
  void write_at(size_t file, int64_t offset, const void* data, int64_t count) override {
    std::lock_guard<std::mutex> lock(mutex);
    std::string& b = bytes.at(file);
    if (b.size() < static_cast<size_t>(offset + count)) b.resize(static_cast<size_t>(offset + count), '\0');
    std::memcpy(&b[static_cast<size_t>(offset)], data, static_cast<size_t>(count));
  }
  const std::string& temp_path(size_t file) override { return temps.at(file); }
};

}  // namespace

TEST_CASE("formats at an offset: runs written in any order, by any split, give the single process's bytes") {
  TempDir dir;
  const int64_t n = 11;
  std::vector<float> images = some_images(n, 77);
  // Values on the byte conversion's edges: (v + 1) / 2 * 255 just below and at whole numbers.
  for (int k = 0; k < 256; ++k) {
    const float edge = static_cast<float>(k) / 255.0f * 2.0f - 1.0f;
    images[static_cast<size_t>(3 * k)] = std::nextafter(edge, -2.0f);
    images[static_cast<size_t>(3 * k + 1)] = edge;
    images[static_cast<size_t>(3 * k + 2)] = std::nextafter(edge, 2.0f);
  }
  SinkOptions options;
  options.mosaic_tiles = 2;  // the mosaics split into three files of 4, 4 and 3 images
  OutputOptions layout_options;
  layout_options.mosaic_tiles = 2;
  for (OutputFormat format : {OutputFormat::Npy, OutputFormat::Bmp, OutputFormat::MosaicPng, OutputFormat::Text}) {
    CAPTURE(format_name(format));
    const std::string prefix = dir.file(std::string("ref-") + format_name(format));
    {
      auto sink = make_sink(format, prefix, n, options);
      write_in_runs(*sink, images, n, 4);
      sink->commit();
    }
    const OutputLayout layout(format, prefix, n, layout_options);
    // Runs [7, 11), [0, 3), [3, 7) in that order (text: in order, its offsets come from a running sum).
    const std::vector<std::pair<int64_t, int64_t>> runs =
        format == OutputFormat::Text ? std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {3, 4}, {7, 4}}
                                     : std::vector<std::pair<int64_t, int64_t>>{{7, 4}, {0, 3}, {3, 4}};
    MemoryFiles memory(layout);
    int64_t text_end = layout.file(0).header.size();
    RecordRun blocks;
    for (auto [first, count] : runs) {
      const float* run = images.data() + first * kImageValues;
      if (format == OutputFormat::Text) {
        auto place = [&](int64_t bytes) { return std::exchange(text_end, text_end + bytes); };
        write_text_run(run, count, 3, blocks, place, memory, 3, 64);
      } else {
        layout.write_run(run, first, count, memory);
      }
    }
    for (size_t f = 0; f < layout.file_count(); ++f) {
      const OutputFile file = layout.file(f);
      CAPTURE(file.path);
      if (file.kind == OutputFile::Kind::Pixels) continue;
      if (file.kind == OutputFile::Kind::Encoded) {
        // The PNG decodes to the pixel file's bytes.
        int w = 0, h = 0, c = 0;
        unsigned char* pixels = stbi_load(file.path.c_str(), &w, &h, &c, 3);
        REQUIRE(pixels != nullptr);
        CHECK(memory.bytes[f - 1] == std::string(reinterpret_cast<char*>(pixels), static_cast<size_t>(w * h * 3)));
        stbi_image_free(pixels);
        continue;
      }
      CHECK(memory.bytes[f] == read_file(file.path));
    }
  }
}

TEST_CASE("commit: all outputs replace the old ones together; a failed rename puts every old one back") {
  TempDir dir;
  auto make_new = [&](const std::string& name) {
    write_file(dir.file(name + ".new"), earlier_text("new " + name));
    return PendingRename{dir.file(name + ".new"), dir.file(name), false, WrittenKind::Text};
  };
  write_file(dir.file("a"), earlier_text("old a"));
  write_file(dir.file("c"), earlier_text("old c"));
  std::filesystem::create_directory(dir.file("p"));
  write_file(dir.file("p/000003.png"), std::string("old png"));
  std::filesystem::create_directory(dir.file("p.new"));
  write_file(dir.file("p.new/000000.png"), std::string("new png"));
  const std::vector<PendingRename> renames = {make_new("a"), make_new("b"),
                                              {dir.file("p.new"), dir.file("p"), true, WrittenKind::PngFolder},
                                              make_new("c")};
  const std::vector<std::string> before = dir.names();
  for (int fail_at = 1; fail_at <= 4; ++fail_at) {
    CAPTURE(fail_at);
    ::setenv("FACEGEN_TEST_FAIL_RENAME", std::to_string(fail_at).c_str(), 1);
    const std::string message = user_error_of([&] { commit_all_or_nothing(renames); });
    CHECK(contains(message, "failed: Input/output error (the old outputs are back in place)"));
    CHECK(read_file(dir.file("a")) == earlier_text("old a"));
    CHECK(!std::filesystem::exists(dir.file("b")));
    CHECK(read_file(dir.file("c")) == earlier_text("old c"));
    CHECK(read_file(dir.file("p/000003.png")) == "old png");
    CHECK(read_file(dir.file("p.new/000000.png")) == "new png");
    CHECK(dir.names() == before);  // every temporary where it was, no backup left
  }
  ::unsetenv("FACEGEN_TEST_FAIL_RENAME");
  commit_all_or_nothing(renames);
  CHECK(read_file(dir.file("a")) == earlier_text("new a"));
  CHECK(read_file(dir.file("b")) == earlier_text("new b"));
  CHECK(read_file(dir.file("c")) == earlier_text("new c"));
  CHECK(read_file(dir.file("p/000000.png")) == "new png");
  CHECK(dir.names() == std::vector<std::string>{"a", "b", "c", "p"});
}

TEST_CASE("commit: what took an old output's place during the run is never replaced") {
  // Each kind of entry that may not be replaced, put at an output's name after the run's checks:
  // the commit refuses it, and nothing is replaced.
  const std::vector<std::string> shapes = {"foreign file", "folder", "symlink", "fifo"};
  for (const std::string& shape : shapes) {
    CAPTURE(shape);
    TempDir dir;
    write_file(dir.file("a"), earlier_text("old a"));
    write_file(dir.file("a.new"), earlier_text("new a"));
    write_file(dir.file("b.new"), earlier_text("new b"));
    write_file(dir.file("elsewhere"), std::string("not facegen's"));
    if (shape == "foreign file") write_file(dir.file("b"), std::string("my notes"));
    if (shape == "folder") std::filesystem::create_directory(dir.file("b"));
    if (shape == "symlink") std::filesystem::create_symlink(dir.file("elsewhere"), dir.file("b"));
    if (shape == "fifo") REQUIRE(::mkfifo(dir.file("b").c_str(), 0600) == 0);
    const std::vector<std::string> before = dir.names();
    const std::string message = user_error_of([&] {
      commit_all_or_nothing({{dir.file("a.new"), dir.file("a"), false, WrittenKind::Text},
                             {dir.file("b.new"), dir.file("b"), false, WrittenKind::Text}});
    });
    CHECK(contains(message, "cannot write the text output " + dir.file("b") + ": it "));
    CHECK(contains(message, "(found at the commit; no output was replaced)"));
    CHECK(read_file(dir.file("a")) == earlier_text("old a"));
    CHECK(read_file(dir.file("elsewhere")) == "not facegen's");
    if (shape == "foreign file") CHECK(read_file(dir.file("b")) == "my notes");
    CHECK(dir.names() == before);
  }
}

TEST_CASE("commit: an immutable old output fails the run before anything is replaced") {
  TempDir dir;
  const std::vector<float> images = some_images(3, 8);
  write_file(dir.file("r.txt"), earlier_text("old text"));
  write_file(dir.file("r.bmp"), earlier_output(WrittenKind::Bmp, "old bmp"));
  if (std::system(("chattr +i " + dir.file("r.bmp") + " 2> /dev/null").c_str()) != 0) {
    MESSAGE("chattr +i does not work here (needs root and a file system that keeps the flag); skipped");
    return;
  }
  std::string message;
  {
    auto text = make_sink(OutputFormat::Text, dir.file("r"), 3);
    auto bmp = make_sink(OutputFormat::Bmp, dir.file("r"), 3);
    text->append(images.data(), 0, 3);
    bmp->append(images.data(), 0, 3);
    message = user_error_of([&] { commit_sinks({text.get(), bmp.get()}); });
  }
  CHECK(std::system(("chattr -i " + dir.file("r.bmp")).c_str()) == 0);
  CHECK(message == "cannot replace " + dir.file("r.bmp") + ": Operation not permitted (no output was replaced)");
  CHECK(read_file(dir.file("r.txt")) == earlier_text("old text"));
  CHECK(read_file(dir.file("r.bmp")) == earlier_output(WrittenKind::Bmp, "old bmp"));
  CHECK(dir.names() == std::vector<std::string>{"r.bmp", "r.txt"});
}

TEST_CASE("commit: the file system full at each output's last byte leaves every old output as it was") {
  TempDir dir;
  const int64_t n = 5;
  const std::vector<float> images = some_images(n, 9);
  // Sizes, largest first: txt ~430 KB, npy 245,888, bmp 110,646, the PNG mosaic less.
  const std::vector<OutputFormat> formats = {OutputFormat::Text, OutputFormat::Npy, OutputFormat::Bmp,
                                             OutputFormat::MosaicPng};
  const std::vector<std::string> names = {"r.txt", "r.npy", "r.bmp", "r.png"};
  std::vector<int64_t> sizes;
  for (OutputFormat format : formats) {
    auto sink = make_sink(format, dir.file("size"), n);
    sink->append(images.data(), 0, n);
    sink->commit();
    sizes.push_back(static_cast<int64_t>(std::filesystem::file_size(dir.file("size." + names[sizes.size()].substr(2)))));
    std::filesystem::remove(dir.file("size." + names[sizes.size() - 1].substr(2)));
  }
  const std::vector<WrittenKind> kinds = {WrittenKind::Text, WrittenKind::Npy, WrittenKind::Bmp, WrittenKind::Png};
  auto old_output = [&](size_t k) { return earlier_output(kinds[k], "old " + names[k]); };
  for (size_t k = 0; k < names.size(); ++k) write_file(dir.file(names[k]), old_output(k));
  for (size_t k = 0; k < formats.size(); ++k) {
    // Output k and every smaller one; files may hold all but output k's last byte.
    CAPTURE(names[k]);
    rlimit saved;
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
    auto saved_handler = ::signal(SIGXFSZ, SIG_IGN);
    std::string message;
    {
      std::vector<std::unique_ptr<ImageSink>> sinks;
      rlimit limit = saved;
      limit.rlim_cur = static_cast<rlim_t>(sizes[k] - 1);
      REQUIRE(::setrlimit(RLIMIT_FSIZE, &limit) == 0);
      message = user_error_of([&] {
        for (size_t j = k; j < formats.size(); ++j) sinks.push_back(make_sink(formats[j], dir.file("r"), n));
        std::vector<ImageSink*> all;
        for (auto& sink : sinks) {
          sink->append(images.data(), 0, n);
          all.push_back(sink.get());
        }
        commit_sinks(all);
      });
    }
    ::setrlimit(RLIMIT_FSIZE, &saved);
    ::signal(SIGXFSZ, saved_handler);
    CHECK(contains(message, "File too large"));
    for (size_t j = 0; j < names.size(); ++j) CHECK(read_file(dir.file(names[j])) == old_output(j));
    CHECK(dir.entries() == 4);
  }
}

TEST_CASE("mosaics written by threads: pieces of whole tile rows, the bytes of one thread, one call per whole row") {
  const int64_t n = 53;
  const std::vector<float> images = some_images(n, 91);
  struct Grid { int64_t columns, padding; int tiles; };
  // A square grid split into files of 4 x 4 tiles; 5 columns with padding; 7 columns, one file.
  for (Grid grid : {Grid{0, 0, 4}, Grid{5, 3, 0}, Grid{7, 0, 0}}) {
    for (OutputFormat format : {OutputFormat::Bmp, OutputFormat::MosaicPng}) {
      CAPTURE(format_name(format));
      CAPTURE(grid.columns);
      OutputOptions options;
      options.grid_columns = grid.columns;
      options.grid_padding = grid.padding;
      options.mosaic_tiles = grid.tiles;
      const OutputLayout layout(format, "/nonexistent/m", n, options);
      MemoryFiles reference(layout);
      layout.write_run(images.data(), 0, n, reference);
      for (int threads : {1, 2, 3, 7}) {
        for (auto [first, count] : std::vector<std::pair<int64_t, int64_t>>{{0, n}, {3, 23}, {26, 27}}) {
          CAPTURE(threads);
          CAPTURE(first);
          struct Counting : MemoryFiles {
            using MemoryFiles::MemoryFiles;
            std::atomic<int64_t> calls{0};
            void write_at(size_t file, int64_t offset, const void* data, int64_t bytes) override {
              ++calls;
              MemoryFiles::write_at(file, offset, data, bytes);
            }
          } out(layout);
          // Every byte after each header poisoned; the threads' write must change exactly what one
          // thread's write of the same run changes, to the same values.
          std::vector<std::string> poisoned = reference.bytes;
          for (size_t f = 0; f < poisoned.size(); ++f) {
            const size_t header = layout.file(f).header.size();
            std::fill(poisoned[f].begin() + static_cast<std::ptrdiff_t>(std::min(header, poisoned[f].size())),
                      poisoned[f].end(), '\x5a');
          }
          out.bytes = poisoned;
          layout.write_run_threaded(images.data() + first * kImageValues, first, count, out, threads);
          MemoryFiles expect(layout);
          expect.bytes = poisoned;
          layout.write_run(images.data() + first * kImageValues, first, count, expect);
          CHECK(out.bytes == expect.bytes);
          if (first == 0 && count == n) {  // every tile of every file, unused tiles and padding black
            MemoryFiles whole(layout);
            layout.write_run_threaded(images.data(), 0, n, whole, threads);
            CHECK(whole.bytes == reference.bytes);
          }
          if (grid.padding == 0 && grid.columns == 7 && first == 3) {
            // [3, 7) partial, [7, 14) [14, 21) whole rows, [21, 26) partial: 64 + 1 + 1 + 64 calls.
            CHECK(out.calls.load() == 130);
          }
        }
      }
    }
  }
}
