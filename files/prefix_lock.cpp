// prefix_lock.cpp: one run at a time into an output prefix (see prefix_lock.hpp).
#include "files/prefix_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "common/errors.hpp"
#include "files/path_parts.hpp"

namespace facegen {
namespace {

// A directory descriptor for the *at calls: O_PATH where the folder may be written but not listed.
int open_folder(const std::string& folder) {
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0 || errno != EACCES) return fd;
  return ::open(folder.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
}

// The pid written in a lock file, or "" when it holds none.
std::string holder_of(int fd) {
  char text[32] = {};
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  if (n <= 0) return "";
  std::string pid(text, static_cast<size_t>(n));
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid.find_first_not_of("0123456789") == std::string::npos ? pid : "";
}

}  // namespace

std::string prefix_lock_name(const std::string& stem) {
  uint64_t hash = 14695981039346656037ull;  // FNV-1a
  for (unsigned char c : stem) hash = (hash ^ c) * 1099511628211ull;
  char name[40];
  std::snprintf(name, sizeof name, ".facegen-lock-%016llx", static_cast<unsigned long long>(hash));
  return name;
}

PrefixLock::PrefixLock(const std::string& prefix) {
  const std::string folder = directory_of(prefix);
  const std::string name = prefix_lock_name(base_name(prefix));
  path_ = (folder == "/" ? "" : folder) + "/" + name;
  // A folder that cannot be opened, or where nothing can be created, takes no output either: no lock
  // is needed, and creating the first output says why in its own words.
  const int dir = open_folder(folder);
  if (dir < 0) return;
  struct DirCloser {
    int fd;
    ~DirCloser() { ::close(fd); }
  } closer{dir};
  auto cannot = [&](const std::string& what, int err) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    throw UserError("cannot " + what + " the lock file " + path_ + " of --output " + prefix + ": " + std::strerror(err));
  };
  // A lock file that its holder removed between our open and our flock is no lock: start again.
  for (int attempt = 0; attempt < 100; ++attempt) {
    bool created = false;
    TempCreation creating;  // a stop by signal meanwhile waits for the listing below
    fd_ = ::openat(dir, name.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd_ < 0 && errno == EACCES) fd_ = ::openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd_ < 0 && errno == ENOENT) {
      fd_ = ::openat(dir, name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
      if (fd_ < 0 && errno == EEXIST) continue;
      created = fd_ >= 0;
    }
    if (fd_ < 0 && errno == ELOOP) {
      throw UserError("the lock file " + path_ + " of --output " + prefix +
                      " is a symbolic link, which facegen never follows (remove it)");
    }
    if (fd_ < 0 && (errno == EACCES || errno == EROFS || errno == ENOSPC || errno == EDQUOT)) return;
    if (fd_ < 0) cannot("open", errno);
    struct stat opened;
    if (::fstat(fd_, &opened) != 0) cannot("examine", errno);
    if (!S_ISREG(opened.st_mode)) {
      ::close(fd_);
      fd_ = -1;
      throw UserError("the lock file " + path_ + " of --output " + prefix +
                      " is not a regular file, so it is not facegen's (remove it)");
    }
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err == ENOLCK || err == EOPNOTSUPP) {  // a file system without locks: run unlocked
        ::close(fd_);
        fd_ = -1;
        return;
      }
      if (err != EWOULDBLOCK) cannot("lock", err);
      const std::string pid = holder_of(fd_);
      ::close(fd_);
      fd_ = -1;
      throw UserError("another facegen run" + (pid.empty() ? "" : " (pid " + pid + ")") +
                      " is writing the outputs of --output " + prefix +
                      " now; facegen runs one at a time into a prefix (wait for it to end, or choose another --output)");
    }
    struct stat there;
    if (::fstatat(dir, name.c_str(), &there, AT_SYMLINK_NOFOLLOW) != 0 || there.st_ino != opened.st_ino ||
        there.st_dev != opened.st_dev) {
      ::close(fd_);  // removed or replaced by its last holder: not the lock any more
      fd_ = -1;
      continue;
    }
    if (created || opened.st_uid == ::geteuid()) {
      const std::string pid = std::to_string(::getpid()) + "\n";
      if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
        // The pid is only for another run's message; the lock holds without it.
      }
    }
    // Ours to remove when we stop (a lock file of another user in a shared folder stays theirs).
    if (opened.st_uid == ::geteuid()) listed_ = register_temp_path(path_, TempKind::File);
    return;
  }
  throw UserError("cannot take the lock file " + path_ + " of --output " + prefix +
                  ": other processes keep replacing it");
}

PrefixLock::~PrefixLock() { release(); }

PrefixLock::PrefixLock(PrefixLock&& other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_), listed_(std::move(other.listed_)) {
  other.fd_ = -1;
}

PrefixLock& PrefixLock::operator=(PrefixLock&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    listed_ = std::move(other.listed_);
    other.fd_ = -1;
  }
  return *this;
}

void PrefixLock::release() noexcept {
  if (fd_ < 0) return;
  // Removed while still locked: a run that opened it meanwhile finds it gone once it gets the lock.
  if (listed_.listed()) {
    struct stat opened, there;
    if (::fstat(fd_, &opened) == 0 && ::lstat(path_.c_str(), &there) == 0 && opened.st_ino == there.st_ino &&
        opened.st_dev == there.st_dev) {
      ::unlink(path_.c_str());
    }
    listed_.release();
  }
  ::close(fd_);
  fd_ = -1;
}

}  // namespace facegen
