// output_guard.cpp: the run's outputs checked before any work (see output_guard.hpp).
#include "commit/output_guard.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>

#include "common/errors.hpp"
#include "commit/existing_outputs.hpp"
#include "common/path_parts.hpp"

namespace facegen {
namespace {

// Where the folder cannot be listed (written but not read: mode 0300), the first files of each
// output are checked by name; the commit checks every one again before it replaces it.
constexpr size_t kCheckedUnlisted = 4096;

// The path of a name in the prefix's folder, spelt as the outputs' paths are.
std::string path_in_folder(const std::string& prefix, const std::string& name) {
  return prefix.find('/') == std::string::npos ? name : directory_of(prefix) + "/" + name;
}

// One pass over the prefix's folder, whatever N is (a split of 10^12 one-tile mosaics has as many
// names, which are never each looked up): every entry that is one of the run's outputs must be one
// that facegen may replace (UserError otherwise); the others of this prefix that look like facegen's
// are returned, sorted: an earlier run's outputs that stay.
std::vector<std::string> check_folder(const std::string& prefix, const std::vector<OutputLayout>& layouts) {
  const std::string stem = base_name(prefix);
  std::vector<std::string> earlier;
  DIR* listing = ::opendir(directory_of(prefix).c_str());
  if (listing == nullptr) {
    for (const OutputLayout& layout : layouts) {
      for (size_t k = 0; k < std::min(layout.file_count(), kCheckedUnlisted); ++k) {
        const OutputFile file = layout.file(k);
        if (file.kind != OutputFile::Kind::Pixels) require_replaceable(file.path, written_kind(layout.format()), "--output");
      }
    }
    return earlier;
  }
  struct Closer {
    DIR* listing;
    ~Closer() { ::closedir(listing); }
  } closer{listing};
  while (const dirent* entry = ::readdir(listing)) {
    const std::string name = entry->d_name;
    if (name.compare(0, stem.size(), stem) != 0) continue;
    const auto writer = std::find_if(layouts.begin(), layouts.end(),
                                     [&](const OutputLayout& layout) { return layout.writes_name(name); });
    if (writer != layouts.end()) {
      require_replaceable(path_in_folder(prefix, name), written_kind(writer->format()), "--output");
      continue;
    }
    for (OutputFormat format : every_format()) {
      if (!is_output_name(format, stem, name)) continue;
      if (why_not_replaceable(::dirfd(listing), name, written_kind(format)).empty()) {
        earlier.push_back(path_in_folder(prefix, name));
      }
      break;
    }
  }
  std::sort(earlier.begin(), earlier.end());
  return earlier;
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
  for (OutputFormat format : formats) layouts.emplace_back(format, prefix, total_images, quiet);
  stale_ = check_folder(prefix, layouts);
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
}

}  // namespace facegen
