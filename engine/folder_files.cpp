// folder_files.cpp: the files of a folder of PNGs on the file system (see folder_files.hpp).
#include "engine/folder_files.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "commit/existing_outputs.hpp"
#include "common/errors.hpp"
#include "common/file_descriptor.hpp"
#include "common/temp_registry.hpp"
#include "engine/profile_skip.hpp"

namespace facegen {
namespace {

// The subfolder part of a relative path ("" for a file of the folder itself) and the file's name.
std::pair<std::string, std::string> split_relative(const std::string& relative) {
  const size_t slash = relative.find('/');
  if (slash == std::string::npos) return {"", relative};
  return {relative.substr(0, slash), relative.substr(slash + 1)};
}

int open_folder_at(int dir_fd, const std::string& name) {
  return ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

constexpr int kCreateFlags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;

// Writers of one run: TO BE MEASURED.
constexpr int kFlatFolderWriters = 1 << 20;
constexpr int kSubfolderWriters = 4;

}  // namespace

int png_folder_writers(PngLayout layout, int threads) {
  static const int forced = [] {
    const char* text = std::getenv("FACEGEN_PNG_WRITERS");
    const int value = text != nullptr ? std::atoi(text) : 0;
    return value > 0 ? value : 0;
  }();
  const int wanted = forced > 0 ? forced : layout == PngLayout::Flat ? kFlatFolderWriters : kSubfolderWriters;
  return std::max(1, std::min(threads, wanted));
}

void write_file_in_folder(int dir_fd, const std::string& relative, const std::string& shown, std::string_view bytes) {
  const ProfileSkip skip = profile_skip();
  if (skip == ProfileSkip::Files) return;  // a profile's run (engine/profile_skip.hpp)
  int fd;
  {
    TempCreation creating;  // a signal's cleanup of the temporary folder waits for the file to exist
    fd = ::openat(dir_fd, relative.c_str(), kCreateFlags, 0644);
    if (fd < 0 && errno == ENOENT && relative.find('/') != std::string::npos) {
      // The subfolder's first file: make the subfolder (another writer may just have).
      const std::string subfolder = split_relative(relative).first;
      if (::mkdirat(dir_fd, subfolder.c_str(), 0755) != 0 && errno != EEXIST) {
        const int err = errno;
        throw UserError("cannot create the subfolder of output file " + shown + ": " + std::strerror(err));
      }
      fd = ::openat(dir_fd, relative.c_str(), kCreateFlags, 0644);
    }
  }
  if (fd < 0) throw UserError("cannot create output file " + shown + ": " + std::strerror(errno));
  Descriptor file{fd};
  size_t done = skip == ProfileSkip::Writes ? bytes.size() : 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      throw UserError("writing " + shown + " failed: " + std::strerror(err) +
                      (err == EFBIG ? " (the file size limit, ulimit -f)" : ""));
    }
    done += static_cast<size_t>(n);
  }
  file.fd = -1;
  if (::close(fd) != 0) throw UserError("writing " + shown + " failed: " + std::strerror(errno));
}

void move_into_folder(int temp_fd, const std::string& temp_folder, int final_fd, const std::string& final_folder,
                      const std::vector<std::string>& relatives) {
  bool made_subfolder = false;
  for (size_t k = 0; k < relatives.size();) {
    const std::string subfolder = split_relative(relatives[k]).first;
    Descriptor temp_sub, final_sub;
    if (!subfolder.empty()) {
      const std::string shown = final_folder + "/" + subfolder;
      const std::string why = why_not_png_subfolder(final_fd, subfolder);
      if (!why.empty()) {
        throw UserError("cannot write the PNG subfolder " + shown + ": it " + why + "; facegen replaces only what it wrote");
      }
      if (::mkdirat(final_fd, subfolder.c_str(), 0755) == 0) {
        made_subfolder = true;
      } else if (errno != EEXIST) {
        const int err = errno;
        throw UserError("cannot create output folder " + shown + ": " + std::strerror(err));
      }
      temp_sub.fd = open_folder_at(temp_fd, subfolder);
      final_sub.fd = open_folder_at(final_fd, subfolder);
      if (temp_sub.fd < 0 || final_sub.fd < 0) {
        const int err = errno;
        throw UserError("cannot open output folder " + (temp_sub.fd < 0 ? temp_folder + "/" + subfolder : shown) +
                        ": " + std::strerror(err));
      }
    }
    const int from = subfolder.empty() ? temp_fd : temp_sub.fd;
    const int to = subfolder.empty() ? final_fd : final_sub.fd;
    // The files of this subfolder: a group of one unit lies in one subfolder, or in the flat folder.
    for (; k < relatives.size(); ++k) {
      const auto [sub, name] = split_relative(relatives[k]);
      if (sub != subfolder) break;
      const std::string why = why_not_replaceable(to, name, WrittenKind::Png);
      if (!why.empty()) {
        throw UserError("cannot write the PNG " + final_folder + "/" + relatives[k] + ": it " + why +
                        "; facegen replaces only what it wrote");
      }
      if (::renameat(from, name.c_str(), to, name.c_str()) != 0) {
        const int err = errno;
        throw UserError("renaming " + temp_folder + "/" + relatives[k] + " to " + final_folder + "/" + relatives[k] +
                        " failed: " + std::strerror(err));
      }
    }
    if (!subfolder.empty()) {
      if (::fsync(final_sub.fd) != 0) {
        const int err = errno;
        throw UserError("writing " + final_folder + "/" + subfolder + " failed: " + std::strerror(err));
      }
      ::unlinkat(temp_fd, subfolder.c_str(), AT_REMOVEDIR);  // emptied, unless the group held part of it
    }
  }
  if ((made_subfolder || relatives.empty() || split_relative(relatives.front()).first.empty()) &&
      ::fsync(final_fd) != 0) {
    const int err = errno;
    throw UserError("writing " + final_folder + " failed: " + std::strerror(err));
  }
}

bool remove_emptied_folder(const std::string& path) {
  Descriptor folder{::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
  if (folder.fd < 0) return false;
  DIR* listing = ::fdopendir(folder.fd);
  if (listing == nullptr) return false;
  folder.fd = -1;  // the listing owns it
  bool emptied = true;
  int err = 0;
  while (const dirent* entry = ::readdir(listing)) {
    if (std::strcmp(entry->d_name, ".") == 0 || std::strcmp(entry->d_name, "..") == 0) continue;
    if (::unlinkat(::dirfd(listing), entry->d_name, AT_REMOVEDIR) != 0 && emptied) {
      emptied = false;
      err = errno == ENOTDIR ? ENOTEMPTY : errno;  // a file left where only empty subfolders may be
    }
  }
  ::closedir(listing);
  if (!emptied) {
    errno = err;
    return false;
  }
  return ::rmdir(path.c_str()) == 0;
}

}  // namespace facegen
