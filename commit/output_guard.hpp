// output_guard.hpp: what a run may do where its outputs go, decided once, before any work.
//
// Both drivers (run/pipeline for one process, rank 0 of an MPI job) make one OutputGuard as soon as
// they know N, before the model's backend starts and before any output is created. It
//   1. takes the prefix's lock (prefix_lock.hpp): one run at a time into a prefix;
//   2. checks, in one pass over the prefix's folder whatever N is, every entry that is one of the
//      run's outputs, and the --summary-json file, against existing_outputs.hpp: a run replaces only
//      what facegen wrote there, and refuses anything else in one sentence (UserError) before it has
//      touched anything (a folder that cannot be listed: the first 4,096 files of each output by
//      name; the commit checks every one again);
//   3. lists the outputs of an earlier run with this prefix that this run will not replace (other
//      formats, numbered mosaic files beyond this run's), which the summary names: nothing is
//      removed that the run does not replace.
// It holds the lock until it is destroyed, after the commit (and the summary) are done.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "formats/output_format.hpp"
#include "commit/prefix_lock.hpp"

namespace facegen {

class OutputGuard {
 public:
  // summary_json: --summary-json's path, "" for none, "-" for standard output. Throws UserError.
  OutputGuard(const std::string& prefix, const std::vector<OutputFormat>& formats, int64_t total_images,
              const OutputOptions& options, const std::string& summary_json);

  // Paths of an earlier run's outputs with this prefix that stay beside the new ones, sorted.
  const std::vector<std::string>& stale() const { return stale_; }


 private:
  PrefixLock lock_;
  std::vector<std::string> stale_;
};

// The outputs' folder of this process's run, as it was when the run began (its device and inode):
// watched by the guard, and by every rank of a parallel job, so that a failure caused by its move,
// removal or replacement during the run (writes then fail with "Not a directory" or "No such file",
// which blames the wrong thing) is told as that. Call before the run's threads start.
void watch_output_folder(const std::string& prefix);
// One sentence when the watched folder is gone or another entry is there now; "" otherwise.
std::string output_folder_change();

// Runs `body`; a UserError from it is told as the change of the outputs' folder where that happened.
template <typename Body>
auto naming_folder_change(Body body) -> decltype(body()) {
  try {
    return body();
  } catch (const UserError&) {
    const std::string change = output_folder_change();
    if (change.empty()) throw;
    throw UserError(change);
  }
}

// Whether --summary-json's value means standard output: "-" or /dev/stdout.
bool summary_to_stdout(const std::string& summary_json);

}  // namespace facegen
