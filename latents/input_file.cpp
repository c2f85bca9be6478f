// input_file.cpp: one descriptor per input, reads by offset or in order, and the change check (see
// input_file.hpp).
#include "latents/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <vector>

#include "common/text_format.hpp"

namespace facegen {
namespace {

FileIdentity identity_of(const struct stat& st) {
  FileIdentity id;
  id.device = static_cast<int64_t>(st.st_dev);
  id.inode = static_cast<int64_t>(st.st_ino);
  id.bytes = S_ISREG(st.st_mode) ? static_cast<int64_t>(st.st_size) : -1;
  id.modified_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return id;
}

const char* kind_word(InputKind kind) { return kind == InputKind::Latents ? "latent file" : "model file"; }

// The rank of this process as the launcher numbers it (mpirun's OpenMPI or PMIx variables), else 0.
int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK"}) {
    if (const char* text = std::getenv(name)) return std::atoi(text);
  }
  return 0;
}

}  // namespace

// FACEGEN_TEST_STOP (input_file.hpp): read once; each point stops the process at most once.
void stop_for_test(const char* point) {
  static const char* const spec = std::getenv("FACEGEN_TEST_STOP");
  if (spec == nullptr) return;
  static std::mutex mutex;
  static std::set<std::string> stopped;  // each point once
  const std::string mine = std::to_string(launcher_rank()) + ":" + point;
  const std::string list = std::string(",") + spec + ",";
  if (list.find("," + mine + ",") == std::string::npos) return;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!stopped.insert(point).second) return;
  }
  std::raise(SIGSTOP);
}

InputFile::InputFile(const std::string& path, InputKind kind) : path_(path), kind_(kind) {
  const bool latents = kind == InputKind::Latents;
  stop_for_test(latents ? "latents-open" : "model-open");
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    const int err = errno;
    throw UserError(std::string("cannot open ") + kind_word(kind) + " " + path + ": " + std::strerror(err));
  }
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    throw UserError(std::string("cannot read ") + kind_word(kind) + " " + path + ": " + std::strerror(err));
  }
  directory_ = S_ISDIR(st.st_mode);
  identity_ = identity_of(st);
  struct statfs fs;
  if (::fstatfs(fd_, &fs) == 0) identity_.fs_type = static_cast<int64_t>(fs.f_type);
  stop_for_test(latents ? "latents-opened" : "model-opened");
}

InputFile::~InputFile() { ::close(fd_); }

std::string InputFile::what() const { return std::string(kind_word(kind_)) + " " + path_; }

FileIdentity InputFile::identity_now() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    throw UserError("cannot read " + what() + ": " + std::strerror(err));
  }
  return identity_of(st);
}

void InputFile::throw_changed(const FileIdentity& now) const {
  std::string how;
  if (now.bytes != identity_.bytes) {
    how = with_commas(identity_.bytes) + " bytes when opened, " + with_commas(now.bytes) + " now";
  } else {
    char moved[48];
    std::snprintf(moved, sizeof moved, "%.3f s", static_cast<double>(now.modified_ns - identity_.modified_ns) * 1e-9);
    how = with_commas(now.bytes) + " bytes when opened and now, but rewritten in place: its modification time moved " +
          moved;
  }
  throw UserError(what() + " changed while it was read (" + how + ")");
}

void InputFile::check_unchanged() const {
  if (!regular()) return;
  const FileIdentity now = identity_now();
  if (now.bytes != identity_.bytes || now.modified_ns != identity_.modified_ns) throw_changed(now);
}

ContentDigest InputFile::digest() const {
  constexpr int64_t kPiece = int64_t{1} << 20;
  std::vector<char> piece(static_cast<size_t>(std::min(kPiece, std::max<int64_t>(bytes(), 1))));
  ContentHash hash;
  for (int64_t offset = 0; offset < bytes(); offset += kPiece) {
    const int64_t n = std::min(kPiece, bytes() - offset);
    read_at(offset, n, piece.data());
    hash.add(piece.data(), static_cast<size_t>(n));
  }
  return hash.digest();
}

void InputFile::read_at(int64_t offset, int64_t bytes, char* dst) const {
  while (bytes > 0) {
    const int64_t got = read_some(offset, bytes, dst);
    // A regular file that shrank was reported by read_some; here a stream ended, or a caller asked for
    // bytes past the size at the open.
    if (got == 0) throw UserError("reading " + what() + " failed: it ends before byte " + with_commas(offset + bytes));
    dst += got;
    offset += got;
    bytes -= got;
  }
}

int64_t InputFile::read_some(int64_t offset, int64_t max, char* dst) const {
  if (!regular()) {
    for (;;) {
      const ssize_t got = ::read(fd_, dst, static_cast<size_t>(max));
      if (got >= 0) return got;
      if (errno == EINTR) continue;
      const int err = errno;
      throw UserError("reading " + what() + " failed: " + std::strerror(err));
    }
  }
  const int64_t wanted = std::max<int64_t>(0, std::min(max, identity_.bytes - offset));
  int64_t done = 0;
  while (done < wanted) {
    const ssize_t got = ::pread(fd_, dst + done, static_cast<size_t>(wanted - done), static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int err = errno;
      throw UserError("reading " + what() + " failed: " + std::strerror(err));
    }
    if (got == 0) throw_changed(identity_now());  // it ends before the size it had at the open
    done += got;
  }
  return done;
}

}  // namespace facegen
