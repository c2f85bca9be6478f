// atomic_file.cpp: output files that appear complete or not at all (see atomic_file.hpp).
//
// Life of one file: mkstemp("<final>.tmp-XXXXXX") beside the final path, buffered writes through
// stdio, then fflush + fsync + fclose + rename on commit(). Each of those calls is checked, so a full
// disk is reported whichever call first notices it. The temporary path is listed in the process's
// temporary-file registry (temp_registry.hpp) from its creation to its rename or removal.
#include "commit/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "common/errors.hpp"
#include "common/path_parts.hpp"
#include "common/temp_registry.hpp"

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

}  // namespace

AtomicFile::AtomicFile(std::string final_path) : final_path_(std::move(final_path)) {
  struct stat st;
  if (::stat(final_path_.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    throw UserError("cannot create output file " + final_path_ + ": a directory of that name exists");
  }

  std::string pattern = final_path_ + ".tmp-XXXXXX";
  const int fd = create_registered_temp_file(pattern, &listed_);  // listed for a signal's cleanup
  if (fd < 0) {
    const int err = errno;
    throw UserError("cannot create output file " + final_path_ + ": " + std::strerror(err) + create_hint(err));
  }
  temp_path_ = pattern;

  // A constructor that throws runs no destructor: remove the file here (also after std::bad_alloc).
  try {
    // mkstemp creates the file 0600; an output file should be as readable as one made by open(2).
    if (::fchmod(fd, 0644 & ~kProcessUmask) != 0) {
      const int err = errno;
      throw UserError("cannot create output file " + final_path_ + ": " + std::strerror(err));
    }
    buffer_.reset(new char[kStdioBufferBytes]);
    file_ = ::fdopen(fd, "wb");
    if (file_ == nullptr) {
      const int err = errno;
      throw UserError("cannot create output file " + final_path_ + ": " + std::strerror(err));
    }
  } catch (...) {
    ::close(fd);
    abandon();
    throw;
  }
  std::setvbuf(file_, buffer_.get(), _IOFBF, kStdioBufferBytes);
}

AtomicFile::AtomicFile(std::string final_path, Unbuffered) : AtomicFile(std::move(final_path)) {
  close_quietly();
  buffer_.reset();
  finished_ = true;
}

void AtomicFile::mark_committed() {
  committed_ = true;
  listed_.release();
}

AtomicFile::~AtomicFile() {
  if (!committed_) abandon();
}

void AtomicFile::fail(const char* what, int err) {
  throw UserError(std::string(what) + " " + final_path_ + " failed: " + std::strerror(err) +
                  (err == EFBIG ? " (the file size limit, ulimit -f)" : ""));
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
  listed_.release();

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
    // ENOTDIR, like ENOENT: the path no longer leads to the file (its folder was moved or replaced
    // during the run, which the run's own error then names).
    if (::unlink(temp_path_.c_str()) != 0 && errno != ENOENT && errno != ENOTDIR) {
      // A file system that turned read-only refuses the removal too; a destructor cannot throw, so
      // say where the file is rather than leave it unmentioned.
      const int err = errno;
      std::fprintf(stderr, "facegen: warning: cannot remove temporary file %s: %s\n", temp_path_.c_str(),
                   std::strerror(err));
    }
    listed_.release();
    temp_path_.clear();
  }
}

}  // namespace facegen
