// output_files.cpp: temporary output files and positioned writes into them (see output_files.hpp).
#include "files/output_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "common/errors.hpp"

namespace facegen {
namespace {

constexpr int64_t kMaxWriteBytes = int64_t{1} << 30;  // one pwrite; Linux writes at most 2 GiB - 4 KB

mode_t process_umask() {
  static const mode_t mask = [] {
    const mode_t m = ::umask(022);
    ::umask(m);
    return m;
  }();
  return mask;
}

// Makes PREFIX.tmp-XXXXXX beside `folder`, listed for a signal's cleanup; returns its path. Throws UserError.
std::string make_temp_folder(const std::string& folder, TempRegistration* listed) {
  struct stat st;
  if (::stat(folder.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    throw UserError("cannot create output folder " + folder + ": a file of that name exists");
  }
  std::string pattern = folder + ".tmp-XXXXXX";
  if (!create_registered_temp_folder(pattern, listed)) {
    const int err = errno;
    throw UserError("cannot create output folder " + folder + ": " + std::strerror(err) +
                    (err == ENOENT ? " (does the directory exist?)" : ""));
  }
  ::chmod(pattern.c_str(), 0755 & ~process_umask());
  return pattern;
}

void write_fully(int fd, int64_t offset, const char* data, int64_t bytes, int* err) {
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, data, static_cast<size_t>(std::min(bytes, kMaxWriteBytes)), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *err = n < 0 ? errno : ENOSPC;
      return;
    }
    data += n;
    offset += n;
    bytes -= n;
  }
  *err = 0;
}

}  // namespace

OutputFiles::OutputFiles(std::vector<OutputFile> files)
    : files_(std::move(files)), slots_(new Slot[files_.size()]) {
  try {
    for (size_t i = 0; i < files_.size(); ++i) {
      const OutputFile& spec = files_[i];
      Slot& slot = slots_[i];
      if (spec.kind == OutputFile::Kind::Folder) {
        slot.temp = make_temp_folder(spec.path, &slot.listed);
        continue;
      }
      // A pixel file is named after its PNG, with a suffix of its own.
      const std::string final_path = spec.kind == OutputFile::Kind::Pixels ? spec.path + ".pixels" : spec.path;
      slot.file = std::make_unique<AtomicFile>(final_path, AtomicFile::Unbuffered{});
      slot.temp = slot.file->temp_path();
      if (spec.image_bytes > 0) slot.data_left = spec.count * spec.image_bytes;
      if (!spec.header.empty()) write_bytes(i, 0, spec.header.data(), static_cast<int64_t>(spec.header.size()));
      if (spec.size > 0) {
        std::lock_guard<std::mutex> lock(slot.mutex);
        if (::ftruncate(descriptor(i), spec.size) != 0) fail(i, errno);
      }
      // The descriptor is opened again by the first image: a mosaic split into thousands of files
      // holds none for the files not being written.
      if (slot.fd >= 0 && ::close(slot.fd) != 0) {
        slot.fd = -1;
        fail(i, errno);
      }
      slot.fd = -1;
    }
  } catch (...) {
    remove_uncommitted();
    throw;
  }
}

OutputFiles::~OutputFiles() { remove_uncommitted(); }

void OutputFiles::remove_uncommitted() noexcept {
  for (size_t i = 0; i < files_.size(); ++i) {
    Slot& slot = slots_[i];
    if (slot.fd >= 0) {
      ::close(slot.fd);
      slot.fd = -1;
    }
    if (!committed_ && !slot.file && !slot.temp.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(slot.temp, ignored);
    }
    slot.listed.release();
    slot.temp.clear();
    slot.file.reset();  // removes an uncommitted temporary file
  }
}

void OutputFiles::fail(size_t file, int err) const {
  throw UserError("writing " + files_[file].path + " failed: " + std::strerror(err) +
                  (err == EFBIG ? " (the file size limit, ulimit -f)" : ""));
}

int OutputFiles::descriptor(size_t file) {
  Slot& slot = slots_[file];
  if (slot.done) throw std::logic_error("write to " + files_[file].path + " after its last image");
  if (slot.fd < 0) {
    slot.fd = ::open(slot.temp.c_str(), O_WRONLY | O_CLOEXEC);
    if (slot.fd < 0) {
      const int err = errno;
      throw UserError("cannot open " + files_[file].path + " (as " + slot.temp + ") for writing: " + std::strerror(err));
    }
  }
  return slot.fd;
}

void OutputFiles::sync_and_close(size_t file, Slot& slot) {
  if (slot.done) return;
  slot.done = true;
  if (slot.fd < 0) slot.fd = ::open(slot.temp.c_str(), O_WRONLY | O_CLOEXEC);
  if (slot.fd < 0) fail(file, errno);
  const int fd = slot.fd;
  slot.fd = -1;
  const bool scratch = files_[file].kind == OutputFile::Kind::Pixels;
  if (!scratch && ::fsync(fd) != 0 && errno != EINVAL) {  // EINVAL: a file that cannot be synced
    const int err = errno;
    ::close(fd);
    fail(file, err);
  }
  if (::close(fd) != 0) fail(file, errno);
}

void OutputFiles::write_bytes(size_t file, int64_t offset, const void* data, int64_t bytes) {
  if (file >= files_.size() || files_[file].kind == OutputFile::Kind::Folder) {
    throw std::logic_error("OutputFiles::write_at: no file " + std::to_string(file));
  }
  Slot& slot = slots_[file];
  int fd;
  {
    std::lock_guard<std::mutex> lock(slot.mutex);
    fd = descriptor(file);
  }
  int err = 0;
  write_fully(fd, offset, static_cast<const char*>(data), bytes, &err);
  if (err != 0) fail(file, err);
  slot.bytes += bytes;
}

int64_t OutputFiles::bytes_written() const {
  int64_t bytes = 0;
  for (size_t i = 0; i < files_.size(); ++i)
    if (files_[i].kind != OutputFile::Kind::Pixels) bytes += slots_[i].bytes.load();
  return bytes;
}

void OutputFiles::write_at(size_t file, int64_t offset, const void* data, int64_t bytes) {
  write_bytes(file, offset, data, bytes);
  Slot& slot = slots_[file];
  if (slot.data_left.load() > 0 && slot.data_left.fetch_sub(bytes) == bytes) {
    std::lock_guard<std::mutex> lock(slot.mutex);
    sync_and_close(file, slot);
  }
}

void OutputFiles::file_complete(size_t file) {
  std::lock_guard<std::mutex> lock(slots_[file].mutex);
  sync_and_close(file, slots_[file]);
}

void OutputFiles::finish() {
  for (size_t i = 0; i < files_.size(); ++i) {
    Slot& slot = slots_[i];
    std::lock_guard<std::mutex> lock(slot.mutex);
    if (files_[i].kind != OutputFile::Kind::Folder) {
      sync_and_close(i, slot);
      continue;
    }
    // One syncfs for the folder's many files instead of an fsync each.
    const int dir = ::open(slot.temp.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) fail(i, errno);
    const int synced = ::syncfs(dir);
    const int err = errno;
    ::close(dir);
    if (synced != 0) fail(i, err);
  }
}

std::vector<PendingRename> OutputFiles::renames() const {
  std::vector<PendingRename> renames;
  for (size_t i = 0; i < files_.size(); ++i) {
    if (files_[i].kind == OutputFile::Kind::Pixels) continue;
    renames.push_back({slots_[i].temp, files_[i].path, files_[i].kind == OutputFile::Kind::Folder});
  }
  return renames;
}

void OutputFiles::mark_committed() {
  committed_ = true;
  for (size_t i = 0; i < files_.size(); ++i) slots_[i].listed.release();
  for (size_t i = 0; i < files_.size(); ++i) {
    if (slots_[i].file && files_[i].kind != OutputFile::Kind::Pixels) slots_[i].file->mark_committed();
  }
}

}  // namespace facegen
