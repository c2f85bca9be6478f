// existing_outputs.cpp: whether facegen may replace what sits at an output's path (see
// existing_outputs.hpp).
#include "commit/existing_outputs.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/errors.hpp"
#include "common/file_descriptor.hpp"
#include "common/model_spec.hpp"
#include "common/text_format.hpp"
#include "common/path_parts.hpp"
#include "formats/png_folder_layout.hpp"

namespace facegen {
namespace {

constexpr size_t kSignatureBytes = 512;  // a tar header: its magic is at 257

uint32_t le32(const std::string& bytes, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | static_cast<unsigned char>(bytes[at + static_cast<size_t>(i)]);
  return v;
}

// The first bytes of a regular file (fewer when it is shorter); false when it cannot be read.
bool first_bytes(int dir_fd, const std::string& name, std::string* bytes) {
  Descriptor file{::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)};
  if (file.fd < 0) return false;
  struct stat st;
  if (::fstat(file.fd, &st) != 0 || !S_ISREG(st.st_mode)) return false;
  bytes->resize(kSignatureBytes);
  size_t got = 0;
  while (got < kSignatureBytes) {
    const ssize_t n = ::pread(file.fd, &(*bytes)[got], kSignatureBytes - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  bytes->resize(got);
  return true;
}

bool starts_with(const std::string& bytes, const char* prefix, size_t length) {
  return bytes.size() >= length && std::memcmp(bytes.data(), prefix, length) == 0;
}

// Whether a NumPy header names a shape (N, S, S, then `tail`, for one of the image sizes facegen writes.
bool names_image_shape(const std::string& bytes, const std::string& tail) {
  for (int size : kImageSizes) {
    const std::string side = std::to_string(size);
    if (bytes.find(", " + side + ", " + side + ", " + tail) != std::string::npos) return true;
  }
  return false;
}

// Whether the first bytes of a file of `size` bytes are those of `kind` (see the header).
bool has_signature(const std::string& bytes, int64_t size, WrittenKind kind) {
  switch (kind) {
    case WrittenKind::Text: {
      size_t digits = 0;
      while (digits < bytes.size() && digits < 20 && bytes[digits] >= '0' && bytes[digits] <= '9') ++digits;
      if (digits == 0 || digits + 1 >= bytes.size() || bytes[digits] != '\n') return false;
      const char value = bytes[digits + 1];
      return value == '-' || (value >= '0' && value <= '9');
    }
    case WrittenKind::Bmp:
      return bytes.size() >= 30 && starts_with(bytes, "BM", 2) && le32(bytes, 2) == static_cast<uint64_t>(size) &&
             le32(bytes, 10) == 54 && bytes[28] == 24 && bytes[29] == 0;
    case WrittenKind::Npy:
      return starts_with(bytes, "\x93NUMPY", 6) && bytes.find("'shape': (") != std::string::npos &&
             names_image_shape(bytes, "");
    case WrittenKind::NpyU8:
      return starts_with(bytes, "\x93NUMPY", 6) && bytes.find("'descr': '|u1'") != std::string::npos &&
             names_image_shape(bytes, "3)");
    case WrittenKind::Tar:  // a ustar member's header first (an empty shard: its two zero blocks alone)
      if (size == 1024) return bytes.find_first_not_of('\0') == std::string::npos;
      return bytes.size() >= 263 && bytes.compare(257, 6, std::string("ustar\0", 6)) == 0;
    case WrittenKind::Png:
      return starts_with(bytes, "\x89PNG\r\n\x1a\n", 8) && bytes.size() >= 16 && bytes.compare(12, 4, "IHDR") == 0;
    case WrittenKind::SummaryJson:
      return starts_with(bytes, "{\n  \"program\": {", 16);
    case WrittenKind::PngFolder:
      return false;
  }
  return false;
}

const char* file_type_phrase(mode_t mode) {
  if (S_ISLNK(mode)) return "is a symbolic link, which facegen never follows nor replaces";
  if (S_ISFIFO(mode)) return "is a FIFO";
  if (S_ISCHR(mode)) return "is a character device";
  if (S_ISBLK(mode)) return "is a block device";
  if (S_ISSOCK(mode)) return "is a socket";
  return nullptr;
}

// Whether the entry `name` of the listing is of the type `type` (a dirent's, DT_UNKNOWN asked of stat).
bool entry_is(DIR* listing, const dirent* entry, unsigned char type) {
  if (entry->d_type != DT_UNKNOWN) return entry->d_type == type;
  struct stat st;
  if (::fstatat(::dirfd(listing), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) return false;
  return type == DT_REG ? S_ISREG(st.st_mode) : type == DT_DIR && S_ISDIR(st.st_mode);
}

// The entries of the folder `name` in `dir_fd` that the PNG folder does not hold: anything but its PNGs
// (regular files), and at the top (depth 0) its subfolders (png_folder_layout.hpp), each holding only
// PNGs. Counts them into *foreign, the first named (its path inside the top folder) in *first.
// False where a folder cannot be listed (errno set).
bool count_foreign_entries(int dir_fd, const std::string& name, int depth, const std::string& shown_as,
                           int64_t* foreign, std::string* first) {
  Descriptor folder{::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
  if (folder.fd < 0) return false;
  DIR* listing = ::fdopendir(folder.fd);
  if (listing == nullptr) return false;
  folder.fd = -1;  // the listing owns it
  bool listed = true;
  while (const dirent* entry = ::readdir(listing)) {
    const std::string entry_name = entry->d_name;
    if (entry_name == "." || entry_name == "..") continue;
    if (is_png_file_name(entry_name) && entry_is(listing, entry, DT_REG)) continue;
    if (depth == 0 && is_png_subfolder_name(entry_name) && entry_is(listing, entry, DT_DIR) &&
        why_not_png_subfolder(::dirfd(listing), entry_name).empty()) {
      listed = count_foreign_entries(::dirfd(listing), entry_name, 1, entry_name + "/", foreign, first);
      if (!listed) break;
      continue;
    }
    if ((*foreign)++ == 0) *first = shown_as + entry_name;
  }
  const int err = errno;
  ::closedir(listing);
  errno = err;
  return listed;
}

// Why a folder may not be replaced by the PNG folder: an entry that is not one of its PNGs or
// subfolders of PNGs.
std::string why_not_png_folder(int dir_fd, const std::string& name) {
  std::string first_foreign;
  int64_t foreign = 0;
  if (!count_foreign_entries(dir_fd, name, 0, "", &foreign, &first_foreign)) {
    return std::string("cannot be listed: ") + std::strerror(errno);
  }
  if (foreign == 0) return "";
  return "holds " + first_foreign +
         (foreign > 1 ? " and " + with_commas(foreign - 1) + " more entr" + (foreign > 2 ? "ies" : "y") : "") +
         ", which facegen does not write there";
}

// Removes the PNGs of the folder `name` in `dir_fd` and, at the top (depth 0), its subfolders of PNGs
// emptied so; returns "" or why something was left.
std::string remove_pngs(int dir_fd, const std::string& name, int depth, const std::string& shown_as) {
  Descriptor folder{::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
  if (folder.fd < 0) return errno == ENOENT ? "" : std::string("cannot open it: ") + std::strerror(errno);
  DIR* listing = ::fdopendir(folder.fd);
  if (listing == nullptr) return std::string("cannot list it: ") + std::strerror(errno);
  folder.fd = -1;
  std::string left;
  while (const dirent* entry = ::readdir(listing)) {
    const std::string entry_name = entry->d_name;
    if (entry_name == "." || entry_name == "..") continue;
    const int at = ::dirfd(listing);
    struct stat st;
    const bool known = ::fstatat(at, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0;
    const bool png = known && is_png_file_name(entry_name) && S_ISREG(st.st_mode);
    if (png && ::unlinkat(at, entry->d_name, 0) == 0) continue;
    const bool subfolder = !png && depth == 0 && known && S_ISDIR(st.st_mode) && is_png_subfolder_name(entry_name) &&
                           why_not_png_subfolder(at, entry_name).empty();
    if (subfolder) {
      std::string why = remove_pngs(at, entry_name, 1, entry_name + "/");
      if (why.empty() && ::unlinkat(at, entry->d_name, AT_REMOVEDIR) != 0) {
        why = errno == ENOTEMPTY ? "something was added to " + entry_name + " meanwhile"
                                 : "cannot remove " + entry_name + ": " + std::strerror(errno);
      }
      if (why.empty()) continue;
      if (left.empty()) left = why;
      continue;
    }
    if (left.empty()) {
      left = png ? "cannot remove " + shown_as + entry_name + ": " + std::strerror(errno)
                 : "it holds " + shown_as + entry_name + ", which facegen did not write";
    }
  }
  ::closedir(listing);
  return left;
}

}  // namespace

WrittenKind written_kind(OutputFormat format) {
  switch (format) {
    case OutputFormat::Text: return WrittenKind::Text;
    case OutputFormat::Bmp: return WrittenKind::Bmp;
    case OutputFormat::Npy: return WrittenKind::Npy;
    case OutputFormat::Png: return WrittenKind::PngFolder;
    case OutputFormat::MosaicPng: return WrittenKind::Png;
    case OutputFormat::NpyU8: return WrittenKind::NpyU8;
    case OutputFormat::Tar: return WrittenKind::Tar;
  }
  return WrittenKind::Text;
}

const char* written_kind_name(WrittenKind kind) {
  switch (kind) {
    case WrittenKind::Text: return "text output";
    case WrittenKind::Bmp: return "BMP mosaic";
    case WrittenKind::Npy: return "npy array";
    case WrittenKind::NpyU8: return "npy array of bytes";
    case WrittenKind::Tar: return "tar shard";
    case WrittenKind::Png: return "PNG mosaic";
    case WrittenKind::PngFolder: return "PNG folder";
    case WrittenKind::SummaryJson: return "JSON summary";
  }
  return "output";
}

bool is_png_file_name(const std::string& name) {
  const size_t end = name.size() >= 4 ? name.size() - 4 : 0;
  if (end == 0 || name.compare(end, 4, ".png") != 0) return false;
  const size_t start = name.compare(0, 4, "seed") == 0 ? 4 : 0;  // named by seed: seed0042.png
  if (end - start < (start == 4 ? 4 : 6) || end - start > 20) return false;
  for (size_t i = start; i < end; ++i)
    if (name[i] < '0' || name[i] > '9') return false;
  return true;
}

std::string why_not_replaceable(int dir_fd, const std::string& name, WrittenKind kind) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
    return "names a folder, not an output's name";
  }
  struct statx st;
  if (::statx(dir_fd, name.c_str(), AT_SYMLINK_NOFOLLOW, STATX_TYPE | STATX_UID | STATX_SIZE, &st) != 0) {
    if (errno == ENOENT || errno == ENAMETOOLONG) return "";  // nothing can be there (creating it says why)
    return std::string("cannot be examined: ") + std::strerror(errno);
  }
  const mode_t mode = st.stx_mode;
  if (const char* phrase = file_type_phrase(mode)) return phrase;
  if ((st.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) && (st.stx_attributes & STATX_ATTR_MOUNT_ROOT)) {
    return "is a mount point";
  }
  struct stat directory;
  if (::fstat(dir_fd, &directory) == 0 && (directory.st_mode & S_ISVTX) && st.stx_uid != ::geteuid()) {
    return "belongs to another user (uid " + std::to_string(st.stx_uid) + ") in a shared folder";
  }
  if (kind == WrittenKind::PngFolder) {
    if (!S_ISDIR(mode)) return "is a file, where the PNG folder goes";
    return why_not_png_folder(dir_fd, name);
  }
  if (S_ISDIR(mode)) return std::string("is a folder, where the ") + written_kind_name(kind) + " goes";
  if (st.stx_size == 0) return "";  // nothing to lose
  std::string bytes;
  if (!first_bytes(dir_fd, name, &bytes)) return std::string("cannot be read: ") + std::strerror(errno);
  if (has_signature(bytes, static_cast<int64_t>(st.stx_size), kind)) return "";
  return std::string("is not a ") + written_kind_name(kind) + " of facegen (its first bytes differ)";
}

void require_replaceable(const std::string& path, WrittenKind kind, const std::string& flag) {
  const std::string directory = directory_of(path);
  Descriptor dir{::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (dir.fd < 0 && errno == EACCES) dir.fd = ::open(directory.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir.fd < 0) return;  // nothing is there to replace; creating the output says why it cannot be
  const std::string why = why_not_replaceable(dir.fd, base_name(path), kind);
  if (why.empty()) return;
  throw UserError("cannot write the " + std::string(written_kind_name(kind)) + " " + path + ": it " + why +
                  "; facegen replaces only what it wrote (move it away or choose another " + flag + ")");
}

std::string remove_old_png_folder(int dir_fd, const std::string& name) {
  const std::string left = remove_pngs(dir_fd, name, 0, "");
  if (!left.empty()) return left;
  if (::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
    return errno == ENOTEMPTY ? "something was added to it meanwhile" : std::string("cannot remove it: ") + std::strerror(errno);
  }
  return "";
}

std::string why_not_png_subfolder(int folder_fd, const std::string& name) {
  if (!is_png_subfolder_name(name)) return "is not named as a subfolder of PNGs";
  struct statx st;
  if (::statx(folder_fd, name.c_str(), AT_SYMLINK_NOFOLLOW, STATX_TYPE | STATX_UID, &st) != 0) {
    if (errno == ENOENT) return "";
    return std::string("cannot be examined: ") + std::strerror(errno);
  }
  if (const char* phrase = file_type_phrase(st.stx_mode)) return phrase;
  if ((st.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) && (st.stx_attributes & STATX_ATTR_MOUNT_ROOT)) {
    return "is a mount point";
  }
  if (!S_ISDIR(st.stx_mode)) return "is a file, where a subfolder of PNGs goes";
  return "";
}

}  // namespace facegen
