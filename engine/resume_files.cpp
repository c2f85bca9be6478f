// resume_files.cpp: the units a --resume run keeps and makes, and their records (see resume_files.hpp).
#include "engine/resume_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "common/errors.hpp"
#include "common/path_parts.hpp"
#include "common/threads.hpp"

namespace facegen {

std::optional<FilesDigest> files_digest(const std::vector<std::string>& paths) {
  FilesDigest total;
  ContentHash hash;
  for (const std::string& path : paths) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0 && (errno == ENOENT || errno == ELOOP || errno == ENOTDIR)) return std::nullopt;
    if (fd < 0) throw UserError("cannot open " + path + ": " + std::strerror(errno));
    struct Closer {
      int fd;
      ~Closer() { ::close(fd); }
    } closer{fd};
    struct stat st;
    if (::fstat(fd, &st) != 0) throw UserError("cannot examine " + path + ": " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) return std::nullopt;
    hash.add_file(fd, static_cast<int64_t>(st.st_size), path);
    total.bytes += static_cast<int64_t>(st.st_size);
  }
  total.digest = hash.digest();
  return total;
}

ResumeFiles::ResumeFiles(std::vector<OutputLayout> layouts, int64_t unit_images,
                         std::unique_ptr<ManifestAppender> appender)
    : layouts_(std::move(layouts)), unit_(unit_images), appender_(std::move(appender)) {
  if (layouts_.empty() || unit_ < 1) throw std::invalid_argument("ResumeFiles: no output, or an empty unit");
  const int64_t total = layouts_.front().total_images();
  units_ = total == 0 ? 1 : (total + unit_ - 1) / unit_;
  for (const OutputLayout& layout : layouts_) {
    if (layout.format() != OutputFormat::Png && static_cast<int64_t>(layout.file_count()) != units_) {
      throw std::logic_error("ResumeFiles: " + layout.describe() + " is not in files of " + std::to_string(unit_) +
                             " images");
    }
  }
  kept_.assign(layouts_.size() * static_cast<size_t>(units_), 0);
}

size_t ResumeFiles::output_of(OutputFormat format) const {
  for (size_t o = 0; o < layouts_.size(); ++o)
    if (layouts_[o].format() == format) return o;
  throw std::logic_error(std::string("ResumeFiles: the job has no output ") + format_name(format));
}

std::vector<std::string> ResumeFiles::unit_paths(size_t output, int64_t unit) const {
  const OutputLayout& layout = layouts_[output];
  if (layout.format() != OutputFormat::Png) return {layout.file(static_cast<size_t>(unit)).path};
  const std::string folder = layout.file(0).path;
  const int64_t first = unit * unit_;
  const int64_t end = std::min(layout.total_images(), first + unit_);
  std::vector<std::string> paths;
  for (int64_t i = first; i < end; ++i) {
    paths.push_back(folder + "/" + png_relative_path(i, layout.total_images(), layout.png_layout(), layout.facts()));
  }
  return paths;
}

void ResumeFiles::verify(const std::vector<UnitRecord>& records, int threads) {
  // The last record of each output's unit (a unit made again is recorded again, with the same bytes).
  std::vector<const UnitRecord*> last(kept_.size(), nullptr);
  for (const UnitRecord& record : records) {
    for (size_t o = 0; o < layouts_.size(); ++o) {
      if (layouts_[o].format() == record.format && record.unit < units_) {
        last[o * static_cast<size_t>(units_) + static_cast<size_t>(record.unit)] = &record;
      }
    }
  }
  parallel_for(static_cast<int64_t>(last.size()), threads, [&](int64_t begin, int64_t end) {
    for (int64_t slot = begin; slot < end; ++slot) {
      const UnitRecord* record = last[static_cast<size_t>(slot)];
      if (record == nullptr) continue;
      std::optional<FilesDigest> found;
      try {
        found = files_digest(unit_paths(static_cast<size_t>(slot / units_), record->unit));
      } catch (const UserError&) {
        found.reset();  // unreadable: made again, which says why if it cannot be
      }
      kept_[static_cast<size_t>(slot)] = found && found->bytes == record->bytes && found->digest == record->digest;
    }
  });
}

void ResumeFiles::set_kept_bytes(std::vector<uint8_t> kept) {
  if (kept.size() != kept_.size()) throw std::logic_error("ResumeFiles::set_kept_bytes: another job's verdict");
  kept_ = std::move(kept);
}

bool ResumeFiles::kept(OutputFormat format, int64_t unit) const {
  return kept_[output_of(format) * static_cast<size_t>(units_) + static_cast<size_t>(unit)] != 0;
}

std::vector<int64_t> ResumeFiles::units_to_make() const {
  std::vector<int64_t> units;
  for (int64_t u = 0; u < units_; ++u) {
    bool every = true;
    for (size_t o = 0; o < layouts_.size(); ++o) every = every && kept_[o * static_cast<size_t>(units_) + static_cast<size_t>(u)];
    if (!every) units.push_back(u);
  }
  return units;
}

void ResumeFiles::record(OutputFormat format, int64_t unit) {
  const size_t output = output_of(format);
  const std::vector<std::string> paths = unit_paths(output, unit);
  const std::optional<FilesDigest> found = files_digest(paths);
  if (!found) throw UserError("--resume: " + paths.front() + " is gone just after it was put in place");
  const std::string folder = directory_of(layouts_[output].file(0).path);
  auto shown = [&](const std::string& path) { return folder == "." ? path : path.substr(folder.size() + 1); };
  const std::string names = shown(paths.front()) + (paths.size() > 1 ? " ... " + shown(paths.back()) : "");
  appender_->append({format, unit, found->bytes, found->digest}, names);
  made_files_ += static_cast<int64_t>(paths.size());
}

int64_t ResumeFiles::kept_files() const {
  int64_t files = 0;
  for (size_t o = 0; o < layouts_.size(); ++o) {
    for (int64_t u = 0; u < units_; ++u) {
      if (!kept_[o * static_cast<size_t>(units_) + static_cast<size_t>(u)]) continue;
      files += layouts_[o].format() == OutputFormat::Png
                   ? std::min(layouts_[o].total_images(), (u + 1) * unit_) - u * unit_
                   : 1;
    }
  }
  return files;
}

}  // namespace facegen
