// dead_temporaries.cpp: the temporaries of dead runs of a prefix, removed (see dead_temporaries.hpp).
#include "commit/dead_temporaries.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>

#include "commit/existing_outputs.hpp"
#include "common/path_parts.hpp"

namespace facegen {
namespace {

constexpr size_t kRandomBytes = 6;   // XXXXXX
constexpr size_t kMaxTagBytes = 32;  // FACEGEN_TEMP_TAG (temp_registry.hpp)

bool letters_and_digits(const std::string& text) {
  for (char c : text)
    if (!std::isalnum(static_cast<unsigned char>(c))) return false;
  return !text.empty();
}

// NAME of NAME.tmp-XXXXXX or NAME.tmp-TAG-XXXXXX; "" where `entry` is not such a name.
std::string final_name_of(const std::string& entry) {
  const size_t marker = entry.rfind(".tmp-");
  if (marker == std::string::npos || marker == 0) return "";
  const std::string suffix = entry.substr(marker + 5);
  if (suffix.size() < kRandomBytes || !letters_and_digits(suffix.substr(suffix.size() - kRandomBytes))) return "";
  if (suffix.size() > kRandomBytes) {
    const size_t tag = suffix.size() - kRandomBytes - 1;
    if (tag > kMaxTagBytes || suffix[tag] != '-' || !letters_and_digits(suffix.substr(0, tag))) return "";
  }
  return entry.substr(0, marker);
}

}  // namespace

std::vector<std::string> remove_dead_temporaries(const std::string& prefix, const std::vector<OutputLayout>& layouts,
                                                 const std::string& manifest_path) {
  std::vector<std::string> removed;
  const std::string stem = base_name(prefix);
  DIR* listing = ::opendir(directory_of(prefix).c_str());
  if (listing == nullptr) return removed;
  const int dir = ::dirfd(listing);
  while (const dirent* entry = ::readdir(listing)) {
    const std::string name = entry->d_name;
    if (name.compare(0, stem.size(), stem) != 0) continue;
    const std::string final = final_name_of(name);
    if (final.empty()) continue;
    bool ours = final == base_name(manifest_path);
    for (const OutputLayout& layout : layouts) ours = ours || layout.writes_name(final);
    struct stat st;
    if (!ours || ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_uid != ::geteuid()) continue;
    if (S_ISREG(st.st_mode)) {
      if (::unlinkat(dir, name.c_str(), 0) == 0) removed.push_back(name);
    } else if (S_ISDIR(st.st_mode)) {
      if (remove_old_png_folder(dir, name).empty()) removed.push_back(name);
    }
  }
  ::closedir(listing);
  return removed;
}

}  // namespace facegen
