// resume_manifest.cpp: the manifest of a --resume run, read, started and appended to (see
// resume_manifest.hpp).
#include "commit/resume_manifest.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "commit/atomic_file.hpp"
#include "common/errors.hpp"
#include "common/file_descriptor.hpp"
#include "common/path_parts.hpp"
#include "common/text_format.hpp"

namespace facegen {
namespace {

const char kManifestLine[] = "facegen resume manifest 1";
const char kPartLine[] = "facegen resume manifest part 1";
const char kSuffix[] = ".facegen-resume";

// Why the open file is not one this user's facegen could have written, or "".
std::string why_not_ours(const struct stat& st) {
  if (!S_ISREG(st.st_mode)) return S_ISDIR(st.st_mode) ? "it is a folder" : "it is not a regular file";
  if (st.st_uid != ::geteuid()) {
    return "it belongs to uid " + std::to_string(st.st_uid) + ", and facegen runs as uid " + std::to_string(::geteuid());
  }
  if (st.st_size > kMaxManifestBytes) {
    return "it is " + with_commas(static_cast<int64_t>(st.st_size)) + " bytes, more than the " +
           with_commas(kMaxManifestBytes) + " facegen reads";
  }
  return "";
}

[[noreturn]] void not_a_manifest(const std::string& path, const std::string& why) {
  throw UserError("--resume: " + one_line(path) + " is not a resume manifest of this user's facegen (" + why +
                  "); move it away to start afresh");
}

// The whole of a manifest file, opened without following a link; "" and false where it does not exist.
bool read_whole(const std::string& path, std::string* text) {
  Descriptor file{::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)};
  if (file.fd < 0 && errno == ENOENT) return false;
  if (file.fd < 0 && errno == ELOOP) not_a_manifest(path, "it is a symbolic link");
  if (file.fd < 0) throw UserError("--resume: cannot open " + one_line(path) + ": " + std::strerror(errno));
  struct stat st;
  if (::fstat(file.fd, &st) != 0) throw UserError("--resume: cannot examine " + one_line(path) + ": " + std::strerror(errno));
  const std::string why = why_not_ours(st);
  if (!why.empty()) not_a_manifest(path, why);
  text->resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < text->size()) {
    const ssize_t n = ::pread(file.fd, &(*text)[got], text->size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw UserError("--resume: reading " + one_line(path) + " failed: " + std::strerror(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  text->resize(got);
  return true;
}

bool parse_count(const std::string& text, int64_t* value) {
  if (text.empty() || text.size() > 18 || (text.size() > 1 && text[0] == '0')) return false;
  *value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    *value = *value * 10 + (c - '0');
  }
  return true;
}

bool parse_digest(const std::string& text, ContentDigest* digest) {
  if (text.size() != 32) return false;
  uint64_t halves[2] = {0, 0};
  for (size_t i = 0; i < 32; ++i) {
    const char c = text[i];
    const int nibble = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (nibble < 0) return false;
    halves[i / 16] = halves[i / 16] << 4 | static_cast<uint64_t>(nibble);
  }
  *digest = {halves[0], halves[1]};
  return true;
}

// The next `count` words of `line` from `at`, each ended by one space (the last may end the line).
std::vector<std::string> words(const std::string& line, size_t count, size_t* at) {
  std::vector<std::string> out;
  while (out.size() < count && *at <= line.size()) {
    size_t end = line.find(' ', *at);
    if (end == std::string::npos) end = line.size();
    out.push_back(line.substr(*at, end - *at));
    *at = end + 1;
  }
  return out;
}

// "unit FORMAT U BYTES XXH3 NAMES"; false where the line is not one.
bool parse_unit(const std::string& line, UnitRecord* record) {
  size_t at = 0;
  const std::vector<std::string> w = words(line, 5, &at);
  if (w.size() != 5 || w[0] != "unit" || at > line.size()) return false;
  bool known = false;
  for (OutputFormat format : every_format()) {
    if (w[1] == format_name(format)) {
      record->format = format;
      known = true;
    }
  }
  return known && parse_count(w[2], &record->unit) && parse_count(w[3], &record->bytes) &&
         parse_digest(w[4], &record->digest);
}

// The lines of a manifest file: every line that ends in a newline (a last line without one was cut
// short by a kill, and is no record).
std::vector<std::string> complete_lines(const std::string& text) {
  std::vector<std::string> lines;
  for (size_t at = 0; at < text.size();) {
    const size_t end = text.find('\n', at);
    if (end == std::string::npos) break;
    lines.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return lines;
}

void parse_into(const std::string& path, const std::string& text, bool part, ResumeManifest* manifest) {
  const std::vector<std::string> lines = complete_lines(text);
  if (lines.empty()) {
    if (part) return;  // made, and cut short before its first line
    not_a_manifest(path, "it holds no complete line");
  }
  const std::string first = part ? kPartLine : kManifestLine;
  if (lines[0] != first) not_a_manifest(path, "line 1 is not '" + first + "'");
  bool units_begun = part;
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    const std::string where = "line " + with_commas(static_cast<int64_t>(i + 1));
    UnitRecord record;
    if (line.compare(0, 4, "job ") == 0 && !units_begun) {
      const size_t space = line.find(' ', 4);
      if (space == std::string::npos || space == 4) not_a_manifest(path, where + " is a job line without a value");
      manifest->job.push_back({line.substr(4, space - 4), line.substr(space + 1)});
    } else if (parse_unit(line, &record)) {
      units_begun = true;
      manifest->units.push_back(record);
    } else {
      not_a_manifest(path, where + (units_begun ? " is not a unit line" : " is neither a job line nor a unit line") +
                               ": '" + one_line(line.substr(0, 80)) + "'");
    }
  }
  if (!part && manifest->job.empty()) not_a_manifest(path, "it records no job");
}

bool is_part_name(const std::string& name, const std::string& manifest_name) {
  if (name.size() <= manifest_name.size() + 1 || name.compare(0, manifest_name.size(), manifest_name) != 0 ||
      name[manifest_name.size()] != '.') {
    return false;
  }
  for (size_t i = manifest_name.size() + 1; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return false;
  return true;
}

// The parts of the manifest `path` in its folder, by path.
std::vector<std::string> part_paths(const std::string& path) {
  std::vector<std::string> parts;
  const std::string folder = directory_of(path);
  DIR* listing = ::opendir(folder.c_str());
  if (listing == nullptr) return parts;
  while (const dirent* entry = ::readdir(listing)) {
    const std::string name = entry->d_name;
    if (is_part_name(name, base_name(path))) parts.push_back(path + name.substr(base_name(path).size()));
  }
  ::closedir(listing);
  return parts;
}

void sync_folder_of(const std::string& path) {
  Descriptor folder{::open(directory_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (folder.fd >= 0) ::fsync(folder.fd);
}

}  // namespace

std::string one_line(const std::string& text) {
  std::string line = text;
  for (char& c : line)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return line;
}

std::string resume_manifest_path(const std::string& prefix) { return prefix + kSuffix; }

std::optional<ResumeManifest> read_resume_manifest(const std::string& prefix) {
  const std::string path = resume_manifest_path(prefix);
  std::string text;
  if (!read_whole(path, &text)) return std::nullopt;
  ResumeManifest manifest;
  parse_into(path, text, false, &manifest);
  for (const std::string& part : part_paths(path)) {
    if (read_whole(part, &text)) parse_into(part, text, true, &manifest);
  }
  return manifest;
}

std::string job_differences(const JobDescription& recorded, const JobDescription& now) {
  std::string differences;
  auto add = [&](const std::string& name, const std::string& was, const std::string& is) {
    differences += (differences.empty() ? "" : "; ") + name + " was " + was + ", this run's is " + is;
  };
  for (const JobField& field : now) {
    const JobField* found = nullptr;
    for (const JobField& old : recorded)
      if (old.name == field.name) found = &old;
    if (found == nullptr) {
      add(field.name, "not recorded", one_line(field.value));
    } else if (found->value != one_line(field.value)) {
      add(field.name, found->value, one_line(field.value));
    }
  }
  for (const JobField& old : recorded) {
    bool known = false;
    for (const JobField& field : now) known = known || field.name == old.name;
    if (!known) add(old.name, old.value, "not one of this facegen's");
  }
  return differences;
}

void start_resume_manifest(const std::string& prefix, const JobDescription& job) {
  const std::string path = resume_manifest_path(prefix);
  for (const std::string& part : part_paths(path)) {
    struct stat st;
    if (::lstat(part.c_str(), &st) != 0) continue;
    const std::string why = S_ISLNK(st.st_mode) ? "it is a symbolic link" : why_not_ours(st);
    if (!why.empty()) not_a_manifest(part, why);
    if (::unlink(part.c_str()) != 0 && errno != ENOENT) {
      throw UserError("--resume: cannot remove " + one_line(part) + ", a part of an earlier manifest: " + std::strerror(errno));
    }
  }
  std::string text = std::string(kManifestLine) + "\n";
  for (const JobField& field : job) text += "job " + field.name + " " + one_line(field.value) + "\n";
  AtomicFile file(path);
  file.write(text.data(), text.size());
  file.commit();
}

ManifestAppender::ManifestAppender(std::string prefix, int part)
    : path_(resume_manifest_path(prefix) + (part > 0 ? "." + std::to_string(part) : "")), part_(part > 0) {}

ManifestAppender::~ManifestAppender() {
  if (fd_ >= 0) ::close(fd_);
}

void ManifestAppender::open_file() {
  auto fail = [&](const std::string& what) {
    throw UserError("--resume: " + what + " " + one_line(path_) + " failed: " + std::strerror(errno));
  };
  Descriptor file;
  bool made = false;
  if (part_) {
    file.fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    made = file.fd >= 0;
    if (file.fd < 0 && errno != EEXIST) fail("creating");
  }
  if (file.fd < 0) file.fd = ::open(path_.c_str(), O_RDWR | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
  if (file.fd < 0 && errno == ELOOP) not_a_manifest(path_, "it is a symbolic link");
  if (file.fd < 0) fail("opening");
  struct stat st;
  if (::fstat(file.fd, &st) != 0) fail("examining");
  const std::string why = why_not_ours(st);
  if (!why.empty()) not_a_manifest(path_, why);
  // A last line cut short by a kill is cut off, so that the next record begins a line of its own.
  off_t end = st.st_size;
  char c = '\n';
  while (end > 0 && ::pread(file.fd, &c, 1, end - 1) == 1 && c != '\n') --end;
  if (end != st.st_size && ::ftruncate(file.fd, end) != 0) fail("cutting the unfinished last line of");
  if (part_ && end == 0 && !write_all(file.fd, std::string(kPartLine) + "\n")) fail("writing");
  if (made) {
    if (::fsync(file.fd) != 0) fail("syncing");
    sync_folder_of(path_);
  }
  fd_ = file.fd;
  file.fd = -1;
}

void ManifestAppender::append(const UnitRecord& record, const std::string& names) {
  const std::string line = "unit " + std::string(format_name(record.format)) + " " + std::to_string(record.unit) + " " +
                           std::to_string(record.bytes) + " " + record.digest.hex() + " " + one_line(names) + "\n";
  std::lock_guard<std::mutex> lock(mutex_);
  if (fd_ < 0) open_file();
  if (!write_all(fd_, line)) throw UserError("--resume: writing " + one_line(path_) + " failed: " + std::strerror(errno));
  if (::fdatasync(fd_) != 0) throw UserError("--resume: syncing " + one_line(path_) + " failed: " + std::strerror(errno));
}

}  // namespace facegen
