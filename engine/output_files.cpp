// output_files.cpp: temporary output files and positioned writes into them (see output_files.hpp).
#include "engine/output_files.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "common/errors.hpp"
#include "common/file_descriptor.hpp"
#include "common/path_parts.hpp"
#include "engine/direct_write.hpp"
#include "engine/folder_files.hpp"
#include "engine/profile_skip.hpp"
#include "engine/pwrite_fully.hpp"
#include "common/text_format.hpp"

namespace facegen {
namespace {

mode_t process_umask() {
  static const mode_t mask = [] {
    const mode_t m = ::umask(022);
    ::umask(m);
    return m;
  }();
  return mask;
}

// Makes PREFIX.tmp-XXXXXX beside `folder`, listed for a signal's cleanup, with room for paths of
// `inner_bytes` more inside it; returns its path. Throws UserError.
std::string make_temp_folder(const std::string& folder, size_t inner_bytes, TempRegistration* listed) {
  struct stat st;
  if (::stat(folder.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    throw UserError("cannot create output folder " + folder + ": a file of that name exists");
  }
  std::string pattern = folder + ".tmp-XXXXXX";
  if (!create_registered_temp_folder(pattern, listed, inner_bytes)) {
    const int err = errno;
    throw UserError("cannot create output folder " + folder + ": " + std::strerror(err) +
                    (err == ENOENT ? " (does the directory exist?)" : ""));
  }
  ::chmod(pattern.c_str(), 0755 & ~process_umask());
  return pattern;
}

}  // namespace

OutputFiles::OutputFiles(FileList files) : files_(std::move(files)) {}

OutputFiles::~OutputFiles() {
  remove_uncommitted();
  if (sync_fd_ >= 0) ::close(sync_fd_);
}

const std::string& OutputFiles::create(size_t file) { return slot(file).temp; }

void OutputFiles::adopt_folder(size_t file, const std::string& temp) {
  std::lock_guard<std::mutex> lock(slots_mutex_);
  if (file >= files_.count || slots_.count(file) != 0) throw std::logic_error("OutputFiles::adopt_folder: file taken");
  auto made = std::make_unique<Slot>();
  made->spec = files_.at(file);
  if (made->spec.kind != OutputFile::Kind::Folder) throw std::logic_error("OutputFiles::adopt_folder: not a folder");
  made->temp = temp;
  made->adopted = true;
  made->index = file;
  open_folder(*made);
  Slot* adopted = slots_.emplace(file, std::move(made)).first->second.get();
  folder_.store(adopted, std::memory_order_release);
}

void OutputFiles::open_folder(Slot& slot) {
  slot.dir_fd = ::open(slot.temp.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (slot.dir_fd < 0) {
    const int err = errno;
    throw UserError("cannot open output folder " + slot.spec.path + " (as " + slot.temp + "): " + std::strerror(err));
  }
}

OutputFiles::Slot& OutputFiles::folder_slot(size_t file) {
  Slot* folder = folder_.load(std::memory_order_acquire);
  return folder != nullptr && folder->index == file ? *folder : slot(file);
}

void OutputFiles::write_in_folder(size_t file, const std::string& name, const std::string& shown, std::string_view bytes) {
  Slot& folder = folder_slot(file);
  if (folder.spec.kind != OutputFile::Kind::Folder) {
    throw std::logic_error("OutputFiles::write_in_folder: " + folder.spec.path + " is not a folder");
  }
  write_file_in_folder(folder.dir_fd, name, shown, bytes);
}

OutputFiles::Slot& OutputFiles::slot(size_t file) {
  std::lock_guard<std::mutex> lock(slots_mutex_);
  auto found = slots_.find(file);
  if (found != slots_.end()) return *found->second;
  if (file >= files_.count) throw std::logic_error("OutputFiles: no file " + std::to_string(file));
  auto made = std::make_unique<Slot>();
  made->spec = files_.at(file);
  made->index = file;
  try {
    make(file, *made);
  } catch (...) {
    if (made->fd >= 0) ::close(made->fd);
    if (made->dir_fd >= 0) ::close(made->dir_fd);
    if (!made->file && !made->temp.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(made->temp, ignored);
    }
    throw;  // the AtomicFile removes its temporary
  }
  Slot& made_slot = *slots_.emplace(file, std::move(made)).first->second;
  if (made_slot.spec.kind == OutputFile::Kind::Folder) folder_.store(&made_slot, std::memory_order_release);
  return made_slot;
}

// With slots_mutex_ held: one file or folder is created at a time.
void OutputFiles::make(size_t file, Slot& slot) {
  const OutputFile& spec = slot.spec;
  if (spec.kind == OutputFile::Kind::Folder) {
    const size_t inner = 1 + spec.longest_name;  // "/000/000000.png", "/seed0042.png"
    slot.temp = make_temp_folder(spec.path, inner, &slot.listed);
    open_folder(slot);
    return;
  }
  // A pixel file is named after its PNG, with a suffix of its own.
  const std::string final_path = spec.kind == OutputFile::Kind::Pixels ? spec.path + ".pixels" : spec.path;
  slot.file = std::make_unique<AtomicFile>(final_path, AtomicFile::Unbuffered{});
  slot.temp = slot.file->temp_path();
  if (files_.count >= kSyncAtOnceFiles && sync_fd_ < 0) {
    // Before any byte is written, so that syncfs through it reports every writeback error since.
    sync_fd_ = ::open(slot.temp.c_str(), O_RDONLY | O_CLOEXEC);
    if (sync_fd_ < 0) fail(slot, errno);
  }
  // A file of images (not an encoded PNG) is synced and closed as its last image is in.
  if (spec.kind != OutputFile::Kind::Encoded && spec.count > 0) slot.images_left = spec.count;
  if (!spec.header.empty()) write_bytes(slot, 0, spec.header.data(), static_cast<int64_t>(spec.header.size()));
  if (spec.size > 0) {
    std::lock_guard<std::mutex> lock(slot.mutex);
    if (::ftruncate(descriptor(slot), spec.size) != 0) fail(slot, errno);
  }
  // The descriptor is opened again by the first image: a mosaic split into thousands of files
  // holds none for the files not being written.
  close_direct(slot);
  if (slot.fd >= 0 && ::close(slot.fd) != 0) {
    slot.fd = -1;
    fail(slot, errno);
  }
  slot.fd = -1;
  (void)file;
}

void OutputFiles::remove_uncommitted() noexcept {
  std::lock_guard<std::mutex> lock(slots_mutex_);
  for (auto& [index, owned] : slots_) {
    Slot& slot = *owned;
    close_direct(slot);
    if (slot.fd >= 0) {
      ::close(slot.fd);
      slot.fd = -1;
    }
    if (slot.dir_fd >= 0) {
      ::close(slot.dir_fd);
      slot.dir_fd = -1;
    }
    if (!committed_ && !slot.file && !slot.temp.empty() && !slot.adopted) {
      std::error_code ignored;
      std::filesystem::remove_all(slot.temp, ignored);
    }
    slot.listed.release();
    slot.temp.clear();
    slot.file.reset();  // removes an uncommitted temporary file
  }
  folder_.store(nullptr, std::memory_order_release);
  slots_.clear();
}

void OutputFiles::fail(const Slot& slot, int err) {
  std::string why;
  if (err == EFBIG) {
    // A file sized up front (npy, a mosaic) may pass the file system's own limit before any image.
    struct rlimit limit;
    const bool ulimit = ::getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY;
    why = ulimit ? " (the file size limit, ulimit -f)"
                 : ": its " + with_commas(slot.spec.size) + " bytes are more than the file system allows";
  }
  throw UserError("writing " + slot.spec.path + " failed: " + std::strerror(err) + why);
}

int OutputFiles::descriptor(Slot& slot) {
  if (slot.done) throw std::logic_error("write to " + slot.spec.path + " after its last image");
  if (slot.fd < 0) {
    slot.fd = ::open(slot.temp.c_str(), O_WRONLY | O_CLOEXEC);
    if (slot.fd < 0) {
      const int err = errno;
      throw UserError("cannot open " + slot.spec.path + " (as " + slot.temp + ") for writing: " + std::strerror(err));
    }
    open_direct_if_wanted(slot);
  }
  return slot.fd;
}

// The large files written in order (tar shards, npy, npy-u8) also get a descriptor for O_DIRECT where
// this file system takes it and it pays (engine/direct_write.hpp).
void OutputFiles::open_direct_if_wanted(Slot& slot) {
  const OutputFormat format = slot.spec.format;
  if (slot.spec.kind != OutputFile::Kind::Data ||
      (format != OutputFormat::Tar && format != OutputFormat::Npy && format != OutputFormat::NpyU8)) {
    return;
  }
  slot.direct = direct_alignment_wanted(slot.fd);
  if (slot.direct.usable()) slot.direct_fd = open_direct(slot.temp.c_str());
  if (slot.direct_fd < 0) slot.direct = {};  // refused (EINVAL): through the page cache
}

void OutputFiles::close_direct(Slot& slot) {
  if (slot.direct_fd >= 0) ::close(slot.direct_fd);
  slot.direct_fd = -1;
  slot.direct = {};
}

void OutputFiles::sync_and_close(Slot& slot) {
  if (slot.done) return;
  slot.done = true;
  close_direct(slot);  // its writes are done; the fsync below covers them (one file)
  if (slot.fd < 0) slot.fd = ::open(slot.temp.c_str(), O_WRONLY | O_CLOEXEC);
  if (slot.fd < 0) fail(slot, errno);
  const int fd = slot.fd;
  slot.fd = -1;
  const bool scratch = slot.spec.kind == OutputFile::Kind::Pixels;
  if (!scratch && sync_fd_ >= 0 && !placed_) {
    unsynced_ = true;  // one of many files: finish() syncs them all at once
  } else if (!scratch && ::fsync(fd) != 0 && errno != EINVAL) {  // EINVAL: a file that cannot be synced
    const int err = errno;
    ::close(fd);
    fail(slot, err);
  }
  if (::close(fd) != 0) fail(slot, errno);
  if (placed_ && !scratch) {
    require_replaceable(slot.spec.path, written_kind(slot.spec.format), "--output");  // as the commit checks
    slot.file->commit();  // renamed over its final name, the folder synced
    placed_(slot.index);
  }
}

void OutputFiles::place_in_folder(size_t file, const std::vector<std::string>& names) {
  Slot& folder = slot(file);
  if (folder.spec.kind != OutputFile::Kind::Folder) throw std::logic_error("OutputFiles::place_in_folder: not a folder");
  // Every byte of the files on the storage: one syncfs, as finish() syncs a folder.
  if (::syncfs(folder.dir_fd) != 0) fail(folder, errno);
  const std::string& final_folder = folder.spec.path;
  if (::mkdir(final_folder.c_str(), 0755) == 0) {
    Descriptor parent{::open(directory_of(final_folder).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
    if (parent.fd >= 0) ::fsync(parent.fd);
  } else if (errno != EEXIST) {
    const int err = errno;
    throw UserError("cannot create output folder " + final_folder + ": " + std::strerror(err));
  }
  Descriptor final{::open(final_folder.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
  if (final.fd < 0) {
    const int err = errno;
    throw UserError("cannot open output folder " + final_folder + ": " + std::strerror(err));
  }
  move_into_folder(folder.dir_fd, folder.temp, final.fd, final_folder, names);
}

void OutputFiles::write_bytes(Slot& slot, int64_t offset, const void* data, int64_t bytes) {
  if (slot.spec.kind == OutputFile::Kind::Folder) {
    throw std::logic_error("OutputFiles::write_at: " + slot.spec.path + " is a folder");
  }
  int fd, direct_fd;
  DirectAlignment direct;
  {
    std::lock_guard<std::mutex> lock(slot.mutex);
    fd = descriptor(slot);
    direct_fd = slot.direct_fd;
    direct = slot.direct;
  }
  int err = 0;
  if (profile_skip() != ProfileSkip::None && slot.spec.kind != OutputFile::Kind::Pixels) {
    // A profile's run without the writes (engine/profile_skip.hpp).
  } else if (direct_fd >= 0) {
    pwrite_direct(fd, direct_fd, direct, offset, data, bytes, &err);
  } else {
    pwrite_fully(fd, offset, data, bytes, &err);
  }
  if (err != 0) fail(slot, err);
  slot.bytes += bytes;
}

size_t OutputFiles::created_count() const {
  std::lock_guard<std::mutex> lock(slots_mutex_);
  return slots_.size();
}

int64_t OutputFiles::bytes_written() const {
  std::lock_guard<std::mutex> lock(slots_mutex_);
  int64_t bytes = 0;
  for (const auto& [index, slot] : slots_)
    if (slot->spec.kind != OutputFile::Kind::Pixels) bytes += slot->bytes.load();
  return bytes;
}

void OutputFiles::write_at(size_t file, int64_t offset, const void* data, int64_t bytes) {
  write_bytes(slot(file), offset, data, bytes);
}

void OutputFiles::images_written(size_t file, int64_t count) {
  Slot& s = slot(file);
  if (s.images_left.load() > 0 && s.images_left.fetch_sub(count) == count) {
    std::lock_guard<std::mutex> lock(s.mutex);
    sync_and_close(s);
  }
}

void OutputFiles::file_complete(size_t file) {
  Slot& s = slot(file);
  std::lock_guard<std::mutex> lock(s.mutex);
  sync_and_close(s);
}

void OutputFiles::finish() {
  std::lock_guard<std::mutex> slots_lock(slots_mutex_);
  if (placed_) {
    // --resume: every file made is in place already; the folders' temporaries are left empty.
    for (auto& [index, owned] : slots_) {
      Slot& slot = *owned;
      if (slot.spec.kind == OutputFile::Kind::Folder) {
        if (!remove_emptied_folder(slot.temp)) fail(slot, errno);
        slot.listed.release();
        slot.temp.clear();
      } else if (!slot.done) {
        throw std::logic_error("OutputFiles::finish: " + slot.spec.path + " was made but never complete");
      }
    }
    return;
  }
  const size_t begin = owned_.first, end = std::min(owned_.second, files_.count);
  const size_t wanted = end > begin ? end - begin : 0;
  size_t made = 0;
  for (const auto& [index, owned] : slots_) made += index >= begin && index < end;
  if (made != wanted || slots_.size() != made) {
    throw std::logic_error("OutputFiles::finish: " + std::to_string(made) + " of " + std::to_string(wanted) +
                           " files were made (" + std::to_string(slots_.size()) + " in all)");
  }
  for (auto& [index, owned] : slots_) {
    Slot& slot = *owned;
    std::lock_guard<std::mutex> lock(slot.mutex);
    if (slot.spec.kind != OutputFile::Kind::Folder) {
      sync_and_close(slot);
      continue;
    }
    // One syncfs for the folder's many files instead of an fsync each.
    if (::syncfs(slot.dir_fd) != 0) fail(slot, errno);
  }
  if (unsynced_ && ::syncfs(sync_fd_) != 0) fail(*slots_.begin()->second, errno);
  unsynced_ = false;
}

std::vector<PendingRename> OutputFiles::renames() const {
  std::lock_guard<std::mutex> lock(slots_mutex_);
  std::vector<PendingRename> renames;
  if (placed_) return renames;  // each went into place as it was complete
  for (const auto& [index, slot] : slots_) {
    if (slot->spec.kind == OutputFile::Kind::Pixels || slot->adopted) continue;
    renames.push_back({slot->temp, slot->spec.path, slot->spec.kind == OutputFile::Kind::Folder,
                       written_kind(slot->spec.format)});
  }
  return renames;
}

void OutputFiles::mark_committed() {
  std::lock_guard<std::mutex> lock(slots_mutex_);
  committed_ = true;
  for (auto& [index, slot] : slots_) slot->listed.release();
  for (auto& [index, slot] : slots_) {
    if (slot->file && slot->spec.kind != OutputFile::Kind::Pixels) slot->file->mark_committed();
  }
}

}  // namespace facegen
