// output_guard.cpp: the run's outputs checked before any work (see output_guard.hpp).
#include "files/output_guard.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>

#include "common/errors.hpp"
#include "files/existing_outputs.hpp"
#include "files/path_parts.hpp"

namespace facegen {
namespace {

// Names in the prefix's folder that some format writes for this prefix and that `layouts` do not
// write, which look like facegen's (an unlistable folder gives none).
std::vector<std::string> earlier_outputs(const std::string& prefix, const std::vector<OutputLayout>& layouts) {
  const std::string folder = directory_of(prefix);
  const std::string stem = base_name(prefix);
  std::vector<std::string> found;
  DIR* listing = ::opendir(folder.c_str());
  if (listing == nullptr) return found;
  while (const dirent* entry = ::readdir(listing)) {
    const std::string name = entry->d_name;
    if (name.compare(0, stem.size(), stem) != 0) continue;
    for (OutputFormat format : every_format()) {
      if (!is_output_name(format, stem, name)) continue;
      const bool ours = std::any_of(layouts.begin(), layouts.end(),
                                    [&](const OutputLayout& layout) { return layout.writes_name(name); });
      if (!ours && why_not_replaceable(::dirfd(listing), name, written_kind(format)).empty()) {
        found.push_back(folder == "." && prefix.find('/') == std::string::npos ? name : folder + "/" + name);
      }
      break;
    }
  }
  ::closedir(listing);
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

namespace {

struct WatchedFolder {
  std::string path;
  dev_t device = 0;
  ino_t inode = 0;
  bool set = false;
};
WatchedFolder watched;  // written before the run's threads start, read after

}  // namespace

void watch_output_folder(const std::string& prefix) {
  watched = WatchedFolder{directory_of(prefix)};
  struct stat folder;
  if (::stat(watched.path.c_str(), &folder) != 0) return;
  watched.device = folder.st_dev;
  watched.inode = folder.st_ino;
  watched.set = true;
}

std::string output_folder_change() {
  if (!watched.set) return "";
  struct stat now;
  std::string what;
  if (::stat(watched.path.c_str(), &now) != 0) {
    what = "it is gone";
  } else if (!S_ISDIR(now.st_mode)) {
    what = "a file is there now";
  } else if (now.st_dev != watched.device || now.st_ino != watched.inode) {
    what = "another folder is there now";
  } else {
    return "";
  }
  return "the output folder " + watched.path + " was moved, removed or replaced while the run wrote into it (" + what +
         "): no output was put in place, and the run's temporary files went with the old folder";
}

bool summary_to_stdout(const std::string& summary_json) { return summary_json == "-" || summary_json == "/dev/stdout"; }

OutputGuard::OutputGuard(const std::string& prefix, const std::vector<OutputFormat>& formats, int64_t total_images,
                         const OutputOptions& options, const std::string& summary_json)
    : lock_(prefix) {
  watch_output_folder(prefix);
  OutputOptions quiet = options;
  quiet.on_notice = nullptr;  // the drivers' own layouts say what is to be said
  std::vector<OutputLayout> layouts;
  for (OutputFormat format : formats) {
    layouts.emplace_back(format, prefix, total_images, quiet);
    const OutputLayout& layout = layouts.back();
    for (size_t k = 0; k < layout.file_count(); ++k) {
      const OutputFile file = layout.file(k);
      if (file.kind == OutputFile::Kind::Pixels) continue;  // scratch, never at a final path
      require_replaceable(file.path, written_kind(format), "--output");
    }
  }
  if (!summary_json.empty() && !summary_to_stdout(summary_json)) {
    // Written after the commit: a folder that cannot take it must fail the run now, not then.
    const std::string folder = directory_of(summary_json);
    auto cannot = [&](const std::string& why) {
      throw UserError("--summary-json " + summary_json + " cannot be written: its folder " + folder + why);
    };
    struct stat st;
    if (::stat(folder.c_str(), &st) != 0) cannot(errno == ENOENT ? " does not exist" : std::string(": ") + std::strerror(errno));
    if (!S_ISDIR(st.st_mode)) cannot(" is not a folder");
    if (::access(folder.c_str(), W_OK | X_OK) != 0) cannot(std::string(": ") + std::strerror(errno));
    require_replaceable(summary_json, WrittenKind::SummaryJson, "--summary-json");
  }
  stale_ = earlier_outputs(prefix, layouts);
}

}  // namespace facegen
