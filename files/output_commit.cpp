// output_commit.cpp: all-or-nothing replacement of a run's outputs (see output_commit.hpp).
#include "files/output_commit.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>

#include "common/errors.hpp"
#include "files/temp_registry.hpp"

namespace facegen {
namespace {

std::string directory_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// A hard link to `path` under a new hidden name beside it: ".NAME.old-XXXXXX". Returns errno or 0.
int link_backup(const std::string& path, std::string* backup) {
  static thread_local std::mt19937_64 random{std::random_device{}()};
  static const char kLetters[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string name = directory_of(path) + "/." + base_name(path) + ".old-";
    for (int i = 0; i < 6; ++i) name.push_back(kLetters[random() % (sizeof kLetters - 1)]);
    if (::link(path.c_str(), name.c_str()) == 0) {
      *backup = name;
      return 0;
    }
    if (errno != EEXIST) return errno;
  }
  return EEXIST;
}

// The rename of step 2, failing on request for fault tests.
int rename_into_place(const PendingRename& r, bool exchange, int ordinal) {
  const char* fail_at = std::getenv("FACEGEN_TEST_FAIL_RENAME");
  if (fail_at != nullptr && std::atoi(fail_at) == ordinal) return EIO;
  const int done = exchange ? ::renameat2(AT_FDCWD, r.temp.c_str(), AT_FDCWD, r.final.c_str(), RENAME_EXCHANGE)
                            : ::rename(r.temp.c_str(), r.final.c_str());
  return done == 0 ? 0 : errno;
}

void warn(const std::string& what, int err) {
  std::fprintf(stderr, "facegen: warning: %s: %s\n", what.c_str(), std::strerror(err));
}

}  // namespace

void commit_all_or_nothing(const std::vector<PendingRename>& renames) {
  CommitInProgress committing;  // a stop from outside waits for the whole commit
  const size_t n = renames.size();
  std::vector<bool> existed(n, false);
  std::vector<std::string> backups(n);  // files only; an old folder is exchanged instead

  // 1. Backups of the old files.
  for (size_t i = 0; i < n; ++i) {
    struct stat st;
    existed[i] = ::lstat(renames[i].final.c_str(), &st) == 0;
    if (!existed[i] || renames[i].folder) continue;
    const int err = link_backup(renames[i].final, &backups[i]);
    if (err != 0) {
      for (size_t k = 0; k < i; ++k)
        if (!backups[k].empty()) ::unlink(backups[k].c_str());
      throw UserError("cannot replace " + renames[i].final + ": " + std::strerror(err) +
                      " (no output was replaced)");
    }
  }

  // 2. The new outputs into place; on a failure, the old ones back.
  for (size_t i = 0; i < n; ++i) {
    const bool exchange = renames[i].folder && existed[i];
    const int err = rename_into_place(renames[i], exchange, static_cast<int>(i) + 1);
    if (err == 0) continue;
    for (size_t k = i; k-- > 0;) {
      const PendingRename& r = renames[k];
      int undone;
      if (r.folder && existed[k]) {
        undone = ::renameat2(AT_FDCWD, r.temp.c_str(), AT_FDCWD, r.final.c_str(), RENAME_EXCHANGE);
      } else if (existed[k]) {
        // The new file back under its temporary name (a link: the final name is never empty),
        // then the old one over it.
        undone = ::link(r.final.c_str(), r.temp.c_str());
        if (undone == 0) undone = ::rename(backups[k].c_str(), r.final.c_str());
      } else {
        undone = ::rename(r.final.c_str(), r.temp.c_str());
      }
      if (undone != 0) warn("cannot put back the old " + r.final, errno);
    }
    for (size_t k = 0; k < n; ++k)
      if (!backups[k].empty() && k >= i) ::unlink(backups[k].c_str());
    throw UserError("renaming " + renames[i].temp + " to " + renames[i].final + " failed: " + std::strerror(err) +
                    " (the old outputs are back in place)");
  }

  // 3. The old outputs go; the renames are made durable.
  std::set<std::string> directories;
  for (size_t i = 0; i < n; ++i) {
    if (!backups[i].empty() && ::unlink(backups[i].c_str()) != 0) warn("cannot remove " + backups[i], errno);
    if (renames[i].folder && existed[i]) {
      std::error_code error;
      std::filesystem::remove_all(renames[i].temp, error);
      if (error) warn("cannot remove the old folder now at " + renames[i].temp, error.value());
    }
    directories.insert(directory_of(renames[i].final));
  }
  for (const std::string& directory : directories) {
    const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
      ::fsync(fd);
      ::close(fd);
    }
  }
}

}  // namespace facegen
