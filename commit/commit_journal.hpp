// commit_journal.hpp: a record, beside the outputs, of a commit under way, so that a commit cut short
// by a kill that no handler sees (SIGKILL: mpirun's, a second after its SIGTERM; the OOM killer; a
// node that lost power) can be finished by another process.
//
// Before commit_all_or_nothing() replaces anything, it writes DIR/.facegen-commit-[TAG-]XXXXXX
// (synced, and the directory too) naming, for each output, its temporary and final names, whether an
// old output existed and the inode of the new one, and holds an exclusive flock on it while it
// commits. The backups of old files are named after it (.facegen-old-TOKEN-INDEX), so the journal
// also says where they are. A journal that no process holds locked belongs to a commit whose
// process died. Finishing it (finish_commit):
//   - when every new output is there (under its temporary or its final name), rolls forward: each new
//     one into place, every backup and old folder removed: the state a finished commit leaves;
//   - when a new output is gone (removed from outside), rolls back: each old output from its backup,
//     the new ones removed;
// then removes the journal. Either way the directory holds one whole set and nothing else of the
// commit. Every step is safe to repeat, so finishing can itself be cut short and started again.
//
// Whose journals: only this user's facegen's. A journal is acted on only when it is a regular file (no
// link followed, no FIFO or device opened), owned by the user running facegen, writable by no one
// else, with one link, of at most 1 GiB and no more than its entries take, and exactly of the form
// facegen writes: its token the end of its own name, one entry or more, each naming an output of
// its own directory (never a journal or a backup) and that output's temporary as facegen names it
// (FINAL.tmp-[TAG-]XXXXXX, FINAL shortened only where the whole name would not fit). Anything else
// with a journal's name (another user's file in a shared folder such as /tmp, a link, a FIFO) is
// left exactly as it is: a run says so in one notice, `--finish-commit` refuses it in one sentence.
// Finishing then touches only what the journal recorded, by names inside its directory's
// descriptor: a temporary is renamed only when its inode and kind (file or folder) are those
// recorded, a backup removed only when it is a regular file, an old PNG folder by its PNGs alone
// (remove_old_png_folder), nothing recursively; in a sticky folder, only this user's entries.
//
// Who finishes: every run, before it creates its outputs, finishes the dead journals of its output
// directory (finish_dead_commits); `facegen --finish-commit JOURNAL` finishes one (run_parallel.sh
// runs it on its own job's journals after the launcher ends). A commit in a process with
// FACEGEN_TEMP_TAG (a rank of run_parallel.sh's job) marks its journal done instead of removing it,
// so that the launcher can tell that the outputs were replaced; finishing a done journal removes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace facegen {

struct CommitEntry {
  std::string temp;   // names inside the journal's directory
  std::string final;
  bool folder = false;
  bool existed = false;  // an old output of the final name was there when the commit began
  uint64_t inode = 0;    // of the new output
};

class CommitJournal {
 public:
  // Writes, syncs and locks the journal in `directory` (a path). Throws UserError naming it when it
  // cannot (nothing has been replaced then).
  CommitJournal(const std::string& directory, std::vector<CommitEntry> entries);
  ~CommitJournal();  // releases the lock; the file stays unless done() or abandon() ran
  CommitJournal(const CommitJournal&) = delete;
  CommitJournal& operator=(const CommitJournal&) = delete;

  int directory_fd() const { return directory_fd_; }
  const std::string& path() const { return path_; }
  std::string backup_name(size_t entry) const;  // where the old file of an entry is kept
  const std::string& token() const { return token_; }

  void done();     // every new output in place, backups gone: removed, or marked done (tagged)
  void abandon();  // nothing replaced after all (rolled back here): removed

 private:
  std::string path_;
  std::string token_;
  int fd_ = -1;
  int directory_fd_ = -1;
};

enum class FinishOutcome {
  NewInPlace,  // rolled forward (or had finished): the run's new outputs are in place
  OldInPlace,  // rolled back: the outputs from before the run are in place
  Busy,        // a live process holds the journal: left alone
};

struct FinishReport {
  FinishOutcome outcome = FinishOutcome::Busy;
  bool was_done = false;    // the commit had finished; only the journal was left
  size_t outputs = 0;       // entries of the journal
  std::string first_final;  // the first output's name, for messages
  std::vector<std::string> left;  // what rolling forward left in place, and why (not what facegen wrote)
};

// "r.txt and 2,000 more": the outputs a report speaks of, for messages ("outputs" when it names none).
std::string outputs_named(const FinishReport& report);

// "; left alone: the old folder now at r.tmp-Ab12Cd (it holds notes.txt, which facegen did not
// write)", or "" when the report left nothing.
std::string left_named(const FinishReport& report);

// Finishes the commit a journal records (see above) and removes the journal. Throws UserError when
// the journal cannot be read or is not one of this user's facegen (then nothing was changed), or the
// outputs can be put in neither state.
FinishReport finish_commit(const std::string& journal_path);

// Finishes every journal in `directory` whose process is gone; returns one sentence per journal
// finished, left alone ("left alone: PATH is not a commit journal of this user's facegen (WHY)") or
// that could not be finished ("warning: ..."), for the caller to print.
std::vector<std::string> finish_dead_commits(const std::string& directory);

// The journal files' name prefix, ".facegen-commit-".
extern const char kCommitJournalPrefix[];

}  // namespace facegen
