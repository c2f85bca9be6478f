// output_commit.hpp: the outputs of a run replace the old ones all together or not at all.
//
// By the time commit_all_or_nothing() runs, every byte of every new output is written and synced in
// a temporary file or folder beside its final path (all in one directory). It then:
//   0. writes and syncs a journal of the commit beside them (commit_journal.hpp), so that a kill
//      that no handler sees (SIGKILL) leaves a commit that the next run, or `facegen
//      --finish-commit`, finishes; a failure here throws: nothing was replaced;
//   1. keeps each old output that exists under a hidden backup name beside it (a hard link for a
//      file, so the old file stays in place meanwhile); a failure here (an immutable old file)
//      removes the backups made so far and throws: nothing was replaced;
//   2. renames each new output over its final path (a folder is exchanged with the old one,
//      renameat2 RENAME_EXCHANGE); a failure at output k puts back outputs 0..k-1 (the old file from
//      its backup, the old folder by exchanging again; each new one goes back to its temporary name)
//      and throws: the old set is as it was;
//   3. removes the backups (an old folder, now at its temporary name), syncs the directory and
//      removes the journal (marks it done in a rank of run_parallel.sh's job, for the launcher).
// Steps 0-3 run inside a CommitInProgress (temp_registry.hpp): a signal that ends the run waits for
// them, in whichever thread it lands, so that a stop from outside finds either the whole old set or
// the whole new one, and no backup or temporary left by the commit.
//
// For fault tests only, FACEGEN_TEST_FAIL_RENAME=K makes the K-th rename of step 2 (counted from 1)
// fail with EIO, and FACEGEN_TEST_KILL_COMMIT=K kills the process (SIGKILL) before the K-th change
// to the directory in steps 1-3.
#pragma once

#include <string>
#include <vector>

#include "commit/existing_outputs.hpp"

namespace facegen {

struct PendingRename {
  std::string temp;   // the new output, complete and synced
  std::string final;  // where it goes
  bool folder = false;
  WrittenKind kind = WrittenKind::Text;  // what it is, for checking what it replaces
};

// Throws UserError naming the output and the system's reason; the old outputs are then untouched
// and each temporary stays where it was (its owner removes it). Every path must be in one directory.
void commit_all_or_nothing(const std::vector<PendingRename>& renames);

}  // namespace facegen
