// prefix_lock.cpp: one run at a time into an output prefix (see prefix_lock.hpp).
#include "commit/prefix_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/errors.hpp"
#include "formats/output_format.hpp"
#include "common/path_parts.hpp"

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

// A lock held by remove_unheld_lock() in another process lasts a moment; a run's lasts its run.
constexpr int kCleanupMilliseconds = 500;

// flock(LOCK_EX | LOCK_NB), tried again every 10 ms for up to `milliseconds` while another holds it.
bool lock_within(int fd, int milliseconds) {
  for (int waited = 0;; waited += 10) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return true;
    if (errno != EWOULDBLOCK || waited >= milliseconds) return false;
    ::usleep(10000);
  }
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
    ~DirCloser() {
      if (fd >= 0) ::close(fd);
    }
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
    if (fd_ < 0 && errno == EISDIR) {
      throw UserError("the lock file " + path_ + " of --output " + prefix +
                      " is not a regular file, so it is not facegen's (remove it)");
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
    if (!lock_within(fd_, kCleanupMilliseconds)) {
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
    // Ours to remove when we stop (a lock file of another user in a shared folder stays theirs), in
    // its folder wherever that has gone meanwhile.
    if (opened.st_uid == ::geteuid()) {
      listed_ = register_temp_path(path_, TempKind::File);
      dir_fd_ = closer.fd;
      closer.fd = -1;
    }
    return;
  }
  throw UserError("cannot take the lock file " + path_ + " of --output " + prefix +
                  ": other processes keep replacing it");
}

PrefixLock::~PrefixLock() { release(); }

PrefixLock::PrefixLock(PrefixLock&& other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_), dir_fd_(other.dir_fd_), listed_(std::move(other.listed_)) {
  other.fd_ = -1;
  other.dir_fd_ = -1;
}

PrefixLock& PrefixLock::operator=(PrefixLock&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    dir_fd_ = other.dir_fd_;
    listed_ = std::move(other.listed_);
    other.fd_ = -1;
    other.dir_fd_ = -1;
  }
  return *this;
}

void PrefixLock::release() noexcept {
  if (fd_ < 0) return;
  // Removed while still locked: a run that opened it meanwhile finds it gone once it gets the lock.
  if (listed_.listed() && dir_fd_ >= 0) {
    const std::string name = base_name(path_);
    struct stat opened, there;
    if (::fstat(fd_, &opened) == 0 && ::fstatat(dir_fd_, name.c_str(), &there, AT_SYMLINK_NOFOLLOW) == 0 &&
        opened.st_ino == there.st_ino && opened.st_dev == there.st_dev) {
      ::unlinkat(dir_fd_, name.c_str(), 0);
    }
  }
  listed_.release();
  if (dir_fd_ >= 0) ::close(dir_fd_);
  dir_fd_ = -1;
  ::close(fd_);
  fd_ = -1;
}

}  // namespace facegen

namespace facegen {

void remove_unheld_lock(const std::string& directory, const std::string& output_name) {
  // The prefixes whose outputs include this name: NAME (a PNG folder), NAME less its extension, and
  // that less a mosaic's number.
  std::vector<std::string> stems = {output_name};
  const size_t dot = output_name.rfind('.');
  if (dot != std::string::npos && dot > 0) {
    stems.push_back(output_name.substr(0, dot));
    const size_t dash = stems.back().rfind('-');
    if (dash != std::string::npos && dash > 0) stems.push_back(stems.back().substr(0, dash));
  }
  const int dir = open_folder(directory);
  if (dir < 0) return;
  for (const std::string& stem : stems) {
    bool names_it = false;
    for (OutputFormat format : every_format()) {
      names_it = names_it || is_output_name(format, stem, output_name);
    }
    if (!names_it) continue;
    const std::string name = prefix_lock_name(stem);
    const int fd = ::openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat opened, there;
    if (::fstat(fd, &opened) == 0 && S_ISREG(opened.st_mode) && opened.st_uid == ::geteuid() &&
        ::flock(fd, LOCK_EX | LOCK_NB) == 0 && ::fstatat(dir, name.c_str(), &there, AT_SYMLINK_NOFOLLOW) == 0 &&
        there.st_ino == opened.st_ino && there.st_dev == opened.st_dev) {
      ::unlinkat(dir, name.c_str(), 0);  // while locked: a run that opened it meanwhile starts again
    }
    ::close(fd);
  }
  ::close(dir);
}

}  // namespace facegen
