// test_support.hpp: small helpers the unit tests share: a temporary directory, whole-file reads and
// writes, a file-size limit, the message of an expected UserError, an earlier run's output, and the
// ways an input file changes under a run.
#pragma once

#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/model_shape.hpp"
#include "common/errors.hpp"
#include "commit/existing_outputs.hpp"
#include "formats/tar_shard.hpp"
#include "formats/output_format.hpp"

namespace facegen_test {

// A fresh directory under /tmp, removed with everything in it when the object goes.
struct TempDir {
  std::string path;
  TempDir() {
    char pattern[] = "/tmp/facegen-test-XXXXXX";
    REQUIRE(::mkdtemp(pattern) != nullptr);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string file(const std::string& name) const { return path + "/" + name; }
  std::vector<std::string> names() const {  // sorted
    std::vector<std::string> out;
    for (const auto& entry : std::filesystem::directory_iterator(path)) out.push_back(entry.path().filename());
    std::sort(out.begin(), out.end());
    return out;
  }
  int entries() const { return static_cast<int>(names().size()); }
};

// Files written past `bytes` fail with EFBIG while this lives: SIGXFSZ is ignored, as the program
// does (stop_signals.hpp), so the write returns. Restores the limit and the signal's disposition.
struct FileSizeLimit {
  rlimit saved{};
  void (*saved_handler)(int) = nullptr;
  explicit FileSizeLimit(rlim_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
    saved_handler = ::signal(SIGXFSZ, SIG_IGN);
    rlimit limit = saved;
    limit.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &limit) == 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved);
    ::signal(SIGXFSZ, saved_handler);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;
};

inline void write_file(const std::string& path, const void* data, size_t bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  REQUIRE(out.good());
}

inline void write_file(const std::string& path, const std::string& bytes) {
  write_file(path, bytes.data(), bytes.size());
}

// An earlier run's output of a kind, as a commit may replace it: bytes that begin as facegen's files
// of that kind begin (commit/existing_outputs.hpp), then `tag`, which tells old from new.
inline std::string earlier_output(facegen::WrittenKind kind, const std::string& tag) {
  switch (kind) {
    case facegen::WrittenKind::Text:
      return "1\n0.0000 " + tag + "\n";
    case facegen::WrittenKind::Bmp: {
      std::string bytes(54, '\0');
      const uint32_t size = static_cast<uint32_t>(54 + tag.size());
      bytes[0] = 'B', bytes[1] = 'M';
      for (int i = 0; i < 4; ++i) bytes[2 + i] = static_cast<char>(size >> (8 * i));
      bytes[10] = 54, bytes[14] = 40, bytes[28] = 24;
      return bytes + tag;
    }
    case facegen::WrittenKind::Npy:
      return facegen::npy_header(1, 3, 64) + tag;
    case facegen::WrittenKind::NpyU8:
      return facegen::npy_u8_header(1, 64) + tag;
    case facegen::WrittenKind::Tar:
      return facegen::tar_header("000000000.png", static_cast<int64_t>(tag.size())) + tag;
    case facegen::WrittenKind::Png:
      return std::string("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16) + tag;
    case facegen::WrittenKind::SummaryJson:
      return "{\n  \"program\": {\"tag\": \"" + tag + "\"}}\n";
    case facegen::WrittenKind::PngFolder:
      break;
  }
  FAIL("earlier_output: a folder has no bytes");
  return "";
}
inline std::string earlier_text(const std::string& tag) { return earlier_output(facegen::WrittenKind::Text, tag); }

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The message of the UserError that `body` throws; fails the test if it throws nothing.
template <typename Body>
std::string user_error_of(Body body) {
  try {
    body();
  } catch (const facegen::UserError& e) {
    return e.what();
  }
  FAIL("expected a UserError");
  return "";
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// What happens to an input's path while a run reads it: the first two leave the opened file as it
// was (the run keeps reading it), the other three change that file.
enum class FileChange { Deleted, RenamedOver, Truncated, Grown, Rewritten };
inline const char* change_name(FileChange change) {
  static const char* const names[] = {"deleted", "renamed over", "truncated", "grown", "rewritten in place"};
  return names[static_cast<int>(change)];
}
inline bool changes_opened_file(FileChange change) {
  return change != FileChange::Deleted && change != FileChange::RenamedOver;
}

// Applies `change` to the file at `path`; `twin` is other bytes of the same size (what is renamed over
// it or written into it); Truncated cuts it to `cut` bytes. A rewrite keeps the inode and sets the
// modification time one second past the old one, so that it differs whatever the file system's
// timestamp granularity.
inline void change_file(const std::string& path, FileChange change, const std::string& twin, size_t cut) {
  struct stat before;
  REQUIRE(::stat(path.c_str(), &before) == 0);
  switch (change) {
    case FileChange::Deleted:
      REQUIRE(::unlink(path.c_str()) == 0);
      return;
    case FileChange::RenamedOver:
      write_file(path + ".new", twin);
      REQUIRE(::rename((path + ".new").c_str(), path.c_str()) == 0);
      return;
    case FileChange::Truncated:
      REQUIRE(::truncate(path.c_str(), static_cast<off_t>(cut)) == 0);
      return;
    case FileChange::Grown: {
      std::ofstream out(path, std::ios::binary | std::ios::app);
      out << " 0.5\n";
      REQUIRE(out.good());
      return;
    }
    case FileChange::Rewritten: {
      REQUIRE(twin.size() == static_cast<size_t>(before.st_size));
      const int fd = ::open(path.c_str(), O_WRONLY);
      REQUIRE(fd >= 0);
      REQUIRE(::pwrite(fd, twin.data(), twin.size(), 0) == static_cast<ssize_t>(twin.size()));
      timespec times[2] = {before.st_atim, before.st_mtim};
      times[1].tv_sec += 1;
      REQUIRE(::futimens(fd, times) == 0);
      ::close(fd);
      return;
    }
  }
}

}  // namespace facegen_test
