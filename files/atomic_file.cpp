// atomic_file.cpp: output files that appear complete or not at all (see atomic_file.hpp).
//
// Life of one file: mkstemp("<final>.tmp-XXXXXX") beside the final path, buffered writes through
// stdio, then fflush + fsync + fclose + rename on commit(). Each of those calls is checked, so a full
// disk is reported whichever call first notices it. The temporary path is listed in a fixed table
// that a signal handler may walk without allocating or locking.
#include "files/atomic_file.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "common/errors.hpp"

namespace facegen {
namespace {

constexpr size_t kStdioBufferBytes = size_t{1} << 20;

// Read once, while the process is still single-threaded (static initialization): umask() can only
// be read by setting it, which would race with other threads creating files.
mode_t read_umask() {
  const mode_t mask = ::umask(022);
  ::umask(mask);
  return mask;
}
const mode_t kProcessUmask = read_umask();

// The signal-time table of live temporary paths. A slot is free (0), being filled (1) or live (2);
// a handler only reads slots that are live, and only calls unlink, which is async-signal-safe.
constexpr int kRegistrySlots = 64;
constexpr size_t kRegistryPathBytes = 4096;
char g_temp_paths[kRegistrySlots][kRegistryPathBytes];
std::atomic<int> g_slot_state[kRegistrySlots];
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs lock-free atomics");

// Returns the slot, or -1 when the table is full or the path too long (then a signal leaves the
// temporary file behind; normal exits still remove it).
int register_temp_path(const std::string& path) {
  if (path.size() >= kRegistryPathBytes) return -1;
  for (int slot = 0; slot < kRegistrySlots; ++slot) {
    int expected = 0;
    if (g_slot_state[slot].compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
      std::memcpy(g_temp_paths[slot], path.c_str(), path.size() + 1);
      g_slot_state[slot].store(2, std::memory_order_release);
      return slot;
    }
  }
  return -1;
}

void unregister_temp_path(int slot) {
  if (slot >= 0) g_slot_state[slot].store(0, std::memory_order_release);
}

// A hint for the usual reasons a file cannot be created in a directory.
const char* create_hint(int err) {
  switch (err) {
    case ENOENT:
    case ENOTDIR: return " (does the directory exist?)";
    case EACCES:
    case EPERM:
    case EROFS: return " (is the directory writable?)";
    default: return "";
  }
}

std::string directory_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

void remove_all_temp_files_for_signal() noexcept {
  for (int slot = 0; slot < kRegistrySlots; ++slot) {
    if (g_slot_state[slot].load(std::memory_order_acquire) == 2) ::unlink(g_temp_paths[slot]);
  }
}

AtomicFile::AtomicFile(std::string final_path) : final_path_(std::move(final_path)) {
  struct stat st;
  if (::stat(final_path_.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    throw UserError("cannot create output file " + final_path_ + ": a directory of that name exists");
  }

  std::string pattern = final_path_ + ".tmp-XXXXXX";
  // A SIGINT/SIGTERM between creating the file and listing it would leave the file behind: hold
  // those two signals in this thread until it is listed. (The pipeline creates its outputs before
  // the CPU backend starts worker threads; a signal taken by a thread of a GPU runtime in this
  // window of two calls could still leave one temporary file.)
  sigset_t stop_signals, previous;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, &previous);
  const int fd = ::mkostemp(&pattern[0], O_CLOEXEC);
  const int create_errno = errno;
  if (fd >= 0) registry_slot_ = register_temp_path(pattern);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (fd < 0) {
    throw UserError("cannot create output file " + final_path_ + ": " + std::strerror(create_errno) +
                    create_hint(create_errno));
  }
  temp_path_ = pattern;

  // mkstemp creates the file 0600; an output file should be as readable as one made by open(2).
  if (::fchmod(fd, 0644 & ~kProcessUmask) != 0) {
    const int err = errno;
    ::close(fd);
    abandon();
    throw UserError("cannot create output file " + final_path_ + ": " + std::strerror(err));
  }
  file_ = ::fdopen(fd, "wb");
  if (file_ == nullptr) {
    const int err = errno;
    ::close(fd);
    abandon();
    throw UserError("cannot create output file " + final_path_ + ": " + std::strerror(err));
  }
  buffer_.reset(new char[kStdioBufferBytes]);
  std::setvbuf(file_, buffer_.get(), _IOFBF, kStdioBufferBytes);
}

AtomicFile::~AtomicFile() {
  if (!committed_) abandon();
}

void AtomicFile::fail(const char* what, int err) {
  throw UserError(std::string(what) + " " + final_path_ + " failed: " + std::strerror(err));
}

void AtomicFile::close_quietly() noexcept {
  if (file_ != nullptr) {
    std::fclose(file_);
    file_ = nullptr;
  }
}

void AtomicFile::write(const void* data, size_t bytes) {
  if (file_ == nullptr) {
    throw std::logic_error("AtomicFile::write on " + final_path_ + " after commit, abandon or a failure");
  }
  if (bytes == 0) return;
  if (std::fwrite(data, 1, bytes, file_) != bytes) {
    const int err = errno;
    close_quietly();  // the stream is in an unknown state; no later write may succeed silently
    fail("writing", err);
  }
}

void AtomicFile::finish_writing() {
  if (finished_) return;
  if (committed_ || file_ == nullptr) {
    throw std::logic_error("AtomicFile::finish_writing on " + final_path_ + " after commit, abandon or a failure");
  }
  if (std::fflush(file_) != 0) {
    const int err = errno;
    close_quietly();
    fail("writing", err);
  }
  if (::fsync(::fileno(file_)) != 0 && errno != EINVAL) {  // EINVAL: a file that cannot be synced
    const int err = errno;
    close_quietly();
    fail("writing", err);
  }
  std::FILE* file = file_;
  file_ = nullptr;
  if (std::fclose(file) != 0) fail("writing", errno);
  buffer_.reset();
  finished_ = true;
}

void AtomicFile::commit() {
  if (committed_) throw std::logic_error("AtomicFile::commit called twice on " + final_path_);
  if (!finished_ && file_ == nullptr) {
    throw std::logic_error("AtomicFile::commit on " + final_path_ + " after abandon or a failure");
  }
  finish_writing();

  if (std::rename(temp_path_.c_str(), final_path_.c_str()) != 0) {
    const int err = errno;
    throw UserError("renaming " + temp_path_ + " to " + final_path_ + " failed: " + std::strerror(err));
  }
  committed_ = true;
  unregister_temp_path(registry_slot_);
  registry_slot_ = -1;

  // Make the rename itself durable; a failure here loses nothing that is not already on disk.
  const int dir = ::open(directory_of(final_path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

void AtomicFile::abandon() {
  close_quietly();
  if (!committed_ && !temp_path_.empty()) {
    if (::unlink(temp_path_.c_str()) != 0 && errno != ENOENT) {
      // A file system that turned read-only refuses the removal too; a destructor cannot throw, so
      // say where the file is rather than leave it unmentioned.
      const int err = errno;
      std::fprintf(stderr, "facegen: warning: cannot remove temporary file %s: %s\n", temp_path_.c_str(),
                   std::strerror(err));
    }
    unregister_temp_path(registry_slot_);
    registry_slot_ = -1;
    temp_path_.clear();
  }
}

}  // namespace facegen
