// prefix_lock.hpp: one run at a time into an output prefix.
//
// Two runs into one prefix at once would each commit a whole set, and the later commit could replace
// part of the earlier one's: a mixed set from two runs, both exiting 0. A run therefore holds an
// exclusive flock on DIR/.facegen-lock-HASH (HASH: 16 hex digits of the prefix's last name, so that
// any name fits NAME_MAX) from before it checks its outputs until they are in place. A second run
// into the same prefix does not wait: it fails at once, in one sentence naming the process that holds
// the lock, before any work (waiting would tie a script to a run it cannot see end).
//
// The lock file holds the holder's pid, for that sentence. It is removed by its holder at the end
// (while still locked, so a run that opened it meanwhile sees it was removed and starts again with a
// new one) and, on a stop by signal, by the temporary-file cleanup (temp_registry.hpp). One left by
// a SIGKILL is unlocked: the next run takes it over, and --finish-commit of that run's journal removes
// it. A lock that a cleanup held for a moment is waited for, half a second at most. Links and other kinds of files at its name are
// never followed nor used. Where the lock file cannot be made (a missing or read-only folder, a full
// disk) no output can be either: the run goes on unlocked, and creating its first output fails with
// the reason.
#pragma once

#include <string>

#include "common/temp_registry.hpp"

namespace facegen {

class PrefixLock {
 public:
  PrefixLock() = default;
  // Takes the lock of `prefix` (a path prefix, as --output gives it). Throws UserError naming the
  // holder when another process holds it, or naming the reason when the lock cannot be made.
  explicit PrefixLock(const std::string& prefix);
  ~PrefixLock();
  PrefixLock(PrefixLock&& other) noexcept;
  PrefixLock& operator=(PrefixLock&& other) noexcept;
  PrefixLock(const PrefixLock&) = delete;
  PrefixLock& operator=(const PrefixLock&) = delete;

  bool held() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

 private:
  void release() noexcept;
  std::string path_;
  int fd_ = -1;      // the lock file, flocked
  int dir_fd_ = -1;  // its folder, for removing it there at the end
  TempRegistration listed_;
};

// The lock file's name for a prefix's last name: ".facegen-lock-" + 16 hex digits.
std::string prefix_lock_name(const std::string& stem);

// After finishing the commit of a run that a SIGKILL ended (--finish-commit): removes the lock file
// that run left in `directory`, found from one of its outputs' names, if it is this user's regular
// file and no process holds it. Anything else is left as it is.
void remove_unheld_lock(const std::string& directory, const std::string& output_name);

}  // namespace facegen
