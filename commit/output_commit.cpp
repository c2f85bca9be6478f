// output_commit.cpp: all-or-nothing replacement of a run's outputs (see output_commit.hpp).
#include "commit/output_commit.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "common/errors.hpp"
#include "commit/commit_journal.hpp"
#include "commit/existing_outputs.hpp"
#include "common/path_parts.hpp"
#include "common/temp_registry.hpp"

namespace facegen {
namespace {

// For fault tests: FACEGEN_TEST_FAIL_RENAME=K fails the K-th rename of step 2 with EIO, and
// FACEGEN_TEST_KILL_COMMIT=K ends the process by SIGKILL before the K-th change to the directory
// (links, renames, removals, counted from 1), as mpirun or the OOM killer would. Read per commit.
struct InjectedFaults {
  int fail_rename = number("FACEGEN_TEST_FAIL_RENAME");
  int kill_at = number("FACEGEN_TEST_KILL_COMMIT");
  int changes = 0;

  static int number(const char* name) {
    const char* text = std::getenv(name);
    return text == nullptr ? 0 : std::atoi(text);
  }
  void before_change() {
    if (kill_at > 0 && ++changes == kill_at) ::kill(::getpid(), SIGKILL);
  }
};

void warn(const std::string& what, int err) {
  std::fprintf(stderr, "facegen: warning: %s: %s\n", what.c_str(), std::strerror(err));
}

// The journal's entries: names within the one directory, whether an old output is there, and the
// inode of each new one.
std::vector<CommitEntry> journal_entries(const std::vector<PendingRename>& renames, const std::string& directory) {
  std::vector<CommitEntry> entries;
  for (const PendingRename& r : renames) {
    if (directory_of(r.temp) != directory || directory_of(r.final) != directory)
      throw std::logic_error("commit_all_or_nothing: every output and temporary must be in " + directory);
    CommitEntry e;
    e.temp = base_name(r.temp);
    e.final = base_name(r.final);
    e.folder = r.folder;
    struct stat st;
    e.existed = ::lstat(r.final.c_str(), &st) == 0;
    // Checked before the run began; checked again, as something else may have taken its place since.
    if (e.existed) {
      try {
        require_replaceable(r.final, r.kind, "--output");
      } catch (const UserError& error) {
        throw UserError(std::string(error.what()) + " (found at the commit; no output was replaced)");
      }
    }
    if (::lstat(r.temp.c_str(), &st) != 0)
      throw UserError("the new output " + r.temp + " is gone: " + std::strerror(errno) + " (no output was replaced)");
    e.inode = static_cast<uint64_t>(st.st_ino);
    entries.push_back(std::move(e));
  }
  return entries;
}

// Step 2's undo for outputs 0 .. done - 1: the old file from its backup, the old folder by exchanging
// again; each new one goes back to its temporary name. True when everything was put back.
bool put_back(const std::vector<CommitEntry>& entries, const CommitJournal& journal, size_t done) {
  const int dir = journal.directory_fd();
  bool all = true;
  for (size_t k = done; k-- > 0;) {
    const CommitEntry& e = entries[k];
    const char* temp = e.temp.c_str();
    const char* final = e.final.c_str();
    int undone;
    if (e.folder && e.existed) {
      undone = ::renameat2(dir, temp, dir, final, RENAME_EXCHANGE);
    } else if (e.existed) {
      // The new file back under its temporary name (a link: the final name is never empty), then
      // the old one over it.
      undone = ::linkat(dir, final, dir, temp, 0);
      if (undone == 0) undone = ::renameat(dir, journal.backup_name(k).c_str(), dir, final);
    } else {
      undone = ::renameat(dir, final, dir, temp);
    }
    if (undone != 0) {
      warn("cannot put back the old " + e.final, errno);
      all = false;
    }
  }
  return all;
}

// An old PNG folder that held something facegen did not write when its PNGs were removed (added
// after the checks): it stays, under a name of its own beside the new folder, never under a
// temporary name that a cleanup would remove.
void keep_old_folder(int dir, const std::string& directory, const CommitEntry& e, const std::string& token,
                     const std::string& why) {
  const std::string kept = e.final + ".old-" + token;
  const std::string shown = (directory == "." ? "" : directory + "/");
  if (::renameat(dir, e.temp.c_str(), dir, kept.c_str()) == 0) {
    std::fprintf(stderr, "facegen: warning: the old PNG folder %s%s was kept as %s%s: %s\n", shown.c_str(),
                 e.final.c_str(), shown.c_str(), kept.c_str(), why.c_str());
  } else {
    warn("the old PNG folder " + shown + e.final + " (" + why + ") stays at " + shown + e.temp, errno);
  }
}

}  // namespace

void commit_all_or_nothing(const std::vector<PendingRename>& renames) {
  if (renames.empty()) return;
  CommitInProgress committing;  // a stop from outside waits for the whole commit
  const std::string directory = directory_of(renames.front().final);
  const std::vector<CommitEntry> entries = journal_entries(renames, directory);
  CommitJournal journal(directory, entries);  // from here a kill leaves a commit others can finish
  const int dir = journal.directory_fd();
  const size_t n = entries.size();
  InjectedFaults faults;

  // 1. Backups of the old files (hard links: the old file stays in place meanwhile).
  for (size_t i = 0; i < n; ++i) {
    if (!entries[i].existed || entries[i].folder) continue;
    faults.before_change();
    if (::linkat(dir, entries[i].final.c_str(), dir, journal.backup_name(i).c_str(), 0) == 0) continue;
    const int err = errno;
    for (size_t k = 0; k < i; ++k)
      if (entries[k].existed && !entries[k].folder) ::unlinkat(dir, journal.backup_name(k).c_str(), 0);
    journal.abandon();
    throw UserError("cannot replace " + renames[i].final + ": " + std::strerror(err) + " (no output was replaced)");
  }

  // 2. The new outputs into place (a folder is exchanged with the old one); on a failure, the old
  // ones back.
  for (size_t i = 0; i < n; ++i) {
    const CommitEntry& e = entries[i];
    faults.before_change();
    int err = 0;
    if (faults.fail_rename == static_cast<int>(i) + 1) {
      err = EIO;
    } else if (e.folder && e.existed
                   ? ::renameat2(dir, e.temp.c_str(), dir, e.final.c_str(), RENAME_EXCHANGE) != 0
                   : ::renameat(dir, e.temp.c_str(), dir, e.final.c_str()) != 0) {
      err = errno;
    }
    if (err == 0) continue;
    const bool restored = put_back(entries, journal, i);
    std::string outcome = "the old outputs are back in place";
    if (restored) {
      for (size_t k = 0; k < n; ++k)
        if (entries[k].existed && !entries[k].folder) ::unlinkat(dir, journal.backup_name(k).c_str(), 0);
      journal.abandon();
    } else {
      outcome = "not every old output could be put back; `facegen --finish-commit " + journal.path() +
                "` puts the new ones in place";
    }
    throw UserError("renaming " + renames[i].temp + " to " + renames[i].final + " failed: " + std::strerror(err) +
                    " (" + outcome + ")");
  }

  // 3. The old outputs go; the renames are made durable; then the journal.
  for (size_t i = 0; i < n; ++i) {
    const CommitEntry& e = entries[i];
    if (e.existed && !e.folder) {
      faults.before_change();
      if (::unlinkat(dir, journal.backup_name(i).c_str(), 0) != 0) warn("cannot remove " + journal.backup_name(i), errno);
    }
    if (e.folder && e.existed) {
      faults.before_change();
      const std::string left = remove_old_png_folder(dir, e.temp);
      if (!left.empty()) keep_old_folder(dir, directory, e, journal.token(), left);
    }
  }
  ::fsync(dir);
  journal.done();
  set_outputs_committed(true);
}

}  // namespace facegen
