// test_output_guard.cpp: what a run may replace (existing_outputs), one run per prefix (prefix_lock)
// and the checks a run makes before any work (output_guard): every format's own output passes its
// signature and a changed first byte fails it; a PNG folder passes only with PNGs in it and loses
// only its PNGs; a held lock refuses a second holder and survives a cleanup; an earlier run's other
// outputs are listed and kept.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "commit/existing_outputs.hpp"
#include "engine/image_sink.hpp"
#include "commit/output_guard.hpp"
#include "commit/prefix_lock.hpp"
#include "test_support.hpp"

using namespace facegen;
using namespace facegen_test;

namespace {

std::vector<float> some_images(int64_t n) {
  std::vector<float> images(static_cast<size_t>(n * kImageValues));
  for (size_t i = 0; i < images.size(); ++i) images[i] = static_cast<float>((i * 7919) % 2001) / 1000.0f - 1.0f;
  return images;
}

// Writes the output of `format` for n images at prefix, as a run does.
void write_output(OutputFormat format, const std::string& prefix, int64_t n) {
  const std::vector<float> images = some_images(n);
  auto sink = make_sink(format, prefix, n);
  sink->append(images.data(), 0, n);
  sink->commit();
}

std::string why(const TempDir& dir, const std::string& name, WrittenKind kind) {
  const int fd = ::open(dir.path.c_str(), O_RDONLY | O_DIRECTORY);
  REQUIRE(fd >= 0);
  const std::string reason = why_not_replaceable(fd, name, kind);
  ::close(fd);
  return reason;
}

}  // namespace

TEST_CASE("existing outputs: each format's own files may be replaced; one changed first byte, or another kind, may not") {
  struct Case {
    OutputFormat format;
    const char* name;
    WrittenKind kind;
  };
  for (const Case& c : {Case{OutputFormat::Text, "r.txt", WrittenKind::Text}, Case{OutputFormat::Bmp, "r.bmp", WrittenKind::Bmp},
                        Case{OutputFormat::Npy, "r.npy", WrittenKind::Npy},
                        Case{OutputFormat::MosaicPng, "r.png", WrittenKind::Png}}) {
    CAPTURE(c.name);
    for (int64_t n : {1, 3, 17}) {
      TempDir dir;
      write_output(c.format, dir.file("r"), n);
      CHECK(why(dir, c.name, c.kind).empty());
      for (WrittenKind other : {WrittenKind::Text, WrittenKind::Bmp, WrittenKind::Npy, WrittenKind::Png,
                                WrittenKind::SummaryJson}) {
        if (other != c.kind) CHECK(!why(dir, c.name, other).empty());
      }
      // Any of the bytes the signature reads, changed, makes it another file.
      std::string bytes = read_file(dir.file(c.name));
      const std::vector<size_t> signature = c.kind == WrittenKind::Text  ? std::vector<size_t>{0, 1}
                                            : c.kind == WrittenKind::Bmp ? std::vector<size_t>{0, 1, 2, 3, 10, 28}
                                            : c.kind == WrittenKind::Npy ? std::vector<size_t>{0, 1, 2, 3, 4, 5}
                                                                         : std::vector<size_t>{0, 1, 2, 3, 4, 5, 6, 7, 12, 13, 14, 15};
      for (size_t at : signature) {
        std::string changed = bytes;
        changed[at] = static_cast<char>(changed[at] ^ 0x40);
        write_file(dir.file("changed"), changed);
        CAPTURE(at);
        CHECK(why(dir, "changed", c.kind) == std::string("is not a ") + written_kind_name(c.kind) +
                                                 " of facegen (its first bytes differ)");
      }
    }
  }
  TempDir dir;
  write_file(dir.file("empty"), std::string());
  CHECK(why(dir, "empty", WrittenKind::Text).empty());  // nothing to lose
  CHECK(why(dir, "absent", WrittenKind::Bmp).empty());
  CHECK(why(dir, "empty", WrittenKind::PngFolder) == "is a file, where the PNG folder goes");
}

TEST_CASE("existing outputs: the names of a PNG folder's files") {
  for (const char* name : {"000000.png", "123456.png", "1234567.png", "000000000042.png", "seed0042.png",
                           "seed123456.png", "seed18446744073709551615.png"}) {
    CAPTURE(name);
    CHECK(is_png_file_name(name));
  }
  for (const char* name : {"00000.png", "000000.PNG", "000000.png.tmp", "a00000.png", "000000.pngx", ".png", "",
                           "-00000.png", "000 00.png", "seed042.png", "seed.png", "Seed0042.png", "seed00x2.png",
                           "seed0042", "seed184467440737095516150.png"}) {
    CAPTURE(name);
    CHECK(!is_png_file_name(name));
  }
}

TEST_CASE("existing outputs: an old PNG folder loses its PNGs and nothing else") {
  TempDir dir;
  std::filesystem::create_directories(dir.file("old/sub"));
  write_file(dir.file("old/000000.png"), std::string("a"));
  write_file(dir.file("old/000001.png"), std::string("b"));
  write_file(dir.file("old/notes.txt"), std::string("mine"));
  write_file(dir.file("old/sub/000002.png"), std::string("mine too"));
  write_file(dir.file("elsewhere.png"), std::string("kept"));
  std::filesystem::create_symlink(dir.file("elsewhere.png"), dir.file("old/000003.png"));
  const int fd = ::open(dir.path.c_str(), O_RDONLY | O_DIRECTORY);
  REQUIRE(fd >= 0);
  const std::string left = remove_old_png_folder(fd, "old");
  CHECK(!left.empty());
  CHECK(!std::filesystem::exists(dir.file("old/000000.png")));
  CHECK(!std::filesystem::exists(dir.file("old/000001.png")));
  CHECK(read_file(dir.file("old/notes.txt")) == "mine");
  CHECK(read_file(dir.file("old/sub/000002.png")) == "mine too");
  CHECK(std::filesystem::is_symlink(dir.file("old/000003.png")));  // a link named as a PNG is not facegen's
  CHECK(read_file(dir.file("elsewhere.png")) == "kept");
  // Only PNGs: the folder goes.
  std::filesystem::create_directory(dir.file("pngs"));
  write_file(dir.file("pngs/000000.png"), std::string("a"));
  CHECK(remove_old_png_folder(fd, "pngs").empty());
  CHECK(!std::filesystem::exists(dir.file("pngs")));
  CHECK(remove_old_png_folder(fd, "absent").empty());
  ::close(fd);
}

TEST_CASE("prefix lock: a second holder is refused in one sentence; released, it can be taken; other prefixes are free") {
  TempDir dir;
  const std::string prefix = dir.file("r");
  {
    PrefixLock first(prefix);
    REQUIRE(first.held());
    CHECK(std::filesystem::exists(first.path()));
    const std::string message = user_error_of([&] { PrefixLock second(prefix); });
    CHECK(message == "another facegen run (pid " + std::to_string(::getpid()) + ") is writing the outputs of --output " +
                         prefix + " now; facegen runs one at a time into a prefix (wait for it to end, or choose another --output)");
    PrefixLock other(dir.file("r2"));
    CHECK(other.held());
    // A cleanup of the held lock leaves it: it is held.
    remove_unheld_lock(dir.path, "r.txt");
    CHECK(std::filesystem::exists(first.path()));
  }
  CHECK(dir.names().empty());  // each removed its lock file
  PrefixLock again(prefix);
  CHECK(again.held());
}

TEST_CASE("prefix lock: a lock left unheld is removed by the cleanup for any of its prefix's output names") {
  for (const char* output : {"r.txt", "r.bmp", "r-0003.bmp", "r.npy", "r", "r.png", "r-0012.png"}) {
    CAPTURE(output);
    TempDir dir;
    const std::string lock = dir.file(prefix_lock_name("r"));
    write_file(lock, std::string("12345\n"));
    write_file(dir.file(prefix_lock_name("other")), std::string("1\n"));
    remove_unheld_lock(dir.path, output);
    CHECK(!std::filesystem::exists(lock));
    CHECK(std::filesystem::exists(dir.file(prefix_lock_name("other"))));
  }
  // Not a regular file, or another user's: left as it is.
  TempDir dir;
  const std::string lock = dir.file(prefix_lock_name("r"));
  std::filesystem::create_directory(lock);
  remove_unheld_lock(dir.path, "r.txt");
  CHECK(std::filesystem::is_directory(lock));
  std::filesystem::remove(lock);
  write_file(lock, std::string("1\n"));
  if (::geteuid() == 0) {
    REQUIRE(::chown(lock.c_str(), 4242, 4242) == 0);
    remove_unheld_lock(dir.path, "r.txt");
    CHECK(std::filesystem::exists(lock));
  }
}

TEST_CASE("output guard: an earlier run's other outputs are named, sorted, and kept; the run's own are not named") {
  TempDir dir;
  const std::string prefix = dir.file("r");
  SinkOptions split;
  split.mosaic_tiles = 1;
  {
    const std::vector<float> images = some_images(3);
    auto bmp = make_sink(OutputFormat::Bmp, prefix, 3, split);  // r-0001.bmp .. r-0003.bmp
    bmp->append(images.data(), 0, 3);
    bmp->commit();
  }
  write_output(OutputFormat::Npy, prefix, 2);
  write_output(OutputFormat::Png, prefix, 2);
  write_file(dir.file("r-0004.bmp"), std::string("not facegen's"));  // not an earlier output: not named
  write_file(dir.file("rr.txt"), earlier_text("another prefix"));
  OutputOptions options;
  options.mosaic_tiles = 1;
  const OutputGuard guard(prefix, {OutputFormat::Bmp, OutputFormat::Text}, 2, options, "");
  CHECK(guard.stale() == std::vector<std::string>{prefix, prefix + "-0003.bmp", prefix + ".npy"});
  CHECK(output_folder_change().empty());
  CHECK(std::filesystem::exists(prefix + "-0003.bmp"));
}

TEST_CASE("output layouts: the names each one writes, and no other") {
  OutputOptions split;
  split.mosaic_tiles = 1;
  struct Case {
    OutputFormat format;
    int64_t images;
    OutputOptions options;
    std::vector<std::string> written, not_written;
  };
  const std::vector<Case> cases = {
      {OutputFormat::Text, 3, {}, {"r.txt"}, {"r", "r.bmp", "r-0001.txt", "rr.txt"}},
      {OutputFormat::Npy, 3, {}, {"r.npy"}, {"r", "r.u8.npy", "r-000000.npy"}},
      {OutputFormat::Png, 3, {}, {"r"}, {"r.png", "r.", "r-0001.png", "rr"}},
      {OutputFormat::MosaicPng, 3, {}, {"r.png"}, {"r", "r-0001.png", "r.png.pixels"}},
      {OutputFormat::Bmp, 3, {}, {"r.bmp"}, {"r-0001.bmp", "r"}},
      {OutputFormat::Bmp, 3, split, {"r-0001.bmp", "r-0002.bmp", "r-0003.bmp"}, {"r.bmp", "r-0004.bmp", "r-0000.bmp", "r-1.bmp"}},
      {OutputFormat::Tar, 3, {}, {"r-000000.tar"}, {"r.tar", "r-000001.tar", "r"}},
  };
  for (const Case& c : cases) {
    CAPTURE(format_name(c.format));
    const OutputLayout layout(c.format, "dir/r", c.images, c.options);
    for (const std::string& name : c.written) CHECK_MESSAGE(layout.writes_name(name), name);
    for (const std::string& name : c.not_written) CHECK_MESSAGE(!layout.writes_name(name), name);
  }
}

TEST_CASE("output guard: the first path that may not be replaced is refused before anything is made") {
  TempDir dir;
  std::filesystem::create_directory(dir.file("r.npy"));
  write_file(dir.file("r.txt"), earlier_text("old"));
  const std::vector<std::string> before = dir.names();
  const std::string message =
      user_error_of([&] { OutputGuard guard(dir.file("r"), {OutputFormat::Text, OutputFormat::Npy}, 2, {}, ""); });
  CHECK(message == "cannot write the npy array " + dir.file("r.npy") +
                       ": it is a folder, where the npy array goes; facegen replaces only what it wrote (move it away "
                       "or choose another --output)");
  CHECK(dir.names() == before);  // the lock file too is gone
  const std::string summary = user_error_of([&] {
    OutputGuard guard(dir.file("q"), {OutputFormat::Text}, 2, {}, dir.file("r.txt"));
  });
  CHECK(contains(summary, "cannot write the JSON summary " + dir.file("r.txt") + ": it is not a JSON summary of facegen"));
  CHECK(contains(user_error_of([&] { OutputGuard guard(dir.file("q"), {OutputFormat::Text}, 2, {}, dir.file("no/s.json")); }),
                 "--summary-json " + dir.file("no/s.json") + " cannot be written: its folder " + dir.file("no") +
                     " does not exist"));
  OutputGuard to_stdout(dir.file("q"), {OutputFormat::Text}, 2, {}, "-");
  CHECK(summary_to_stdout("-"));
  CHECK(summary_to_stdout("/dev/stdout"));
  CHECK(!summary_to_stdout("./-"));
}
