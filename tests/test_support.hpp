// test_support.hpp: small helpers the unit tests share: a temporary directory, whole-file reads and
// writes, a file-size limit, and the message of an expected UserError.
#pragma once

#include <doctest/doctest.h>

#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/errors.hpp"

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

}  // namespace facegen_test
