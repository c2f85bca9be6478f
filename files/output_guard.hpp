// output_guard.hpp: what a run may do where its outputs go, decided once, before any work.
//
// Both drivers (run/pipeline for one process, rank 0 of an MPI job) make one OutputGuard as soon as
// they know N, before the model's backend starts and before any output is created. It
//   1. takes the prefix's lock (prefix_lock.hpp): one run at a time into a prefix;
//   2. checks every final path of every requested output, and the --summary-json file, against
//      existing_outputs.hpp: a run replaces only what facegen wrote there, and refuses anything else
//      in one sentence (UserError) before it has touched anything;
//   3. lists the outputs of an earlier run with this prefix that this run will not replace (other
//      formats, numbered mosaic files beyond this run's), which the summary names: nothing is
//      removed that the run does not replace.
// It holds the lock until it is destroyed, after the commit (and the summary) are done.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "files/output_format.hpp"
#include "files/prefix_lock.hpp"

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

// Whether --summary-json's value means standard output: "-" or /dev/stdout.
bool summary_to_stdout(const std::string& summary_json);

}  // namespace facegen
