// atomic_file.hpp: an output file that appears complete or not at all.
//
// Writes go to a temporary file beside the final path (same directory, so rename is atomic);
// commit() flushes, fsyncs and renames it over the final path. If the object is destroyed before
// commit() (an error, an exception), the temporary file is removed and an existing file of the final
// name is left untouched. Every failure (directory missing or not writable, disk full) is a UserError
// naming the path and the system's reason.
//
// The temporary file is <final>.tmp-XXXXXX (mkstemp), mode 0644 less the umask. Live temporary paths
// are also kept in a fixed-size process-wide table so that a SIGINT/SIGTERM handler can remove them
// with remove_all_temp_files_for_signal() before the process dies.
#pragma once

#include <cstddef>
#include <cstdio>
#include <memory>
#include <string>

namespace facegen {

class AtomicFile {
 public:
  explicit AtomicFile(std::string final_path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);  // throws UserError on a write failure (disk full)
  void commit();   // flush, fsync, close, rename over the final path; throws UserError
  // Flush, fsync and close now, keeping the temporary file for a later commit() (which then only
  // renames): a finished file of many holds no buffer nor descriptor while the others are written.
  void finish_writing();
  void abandon();  // remove the temporary file now; the object can no longer be written

  const std::string& final_path() const { return final_path_; }
  const std::string& temp_path() const { return temp_path_; }
  bool committed() const { return committed_; }

 private:
  std::string final_path_;
  std::string temp_path_;
  std::FILE* file_ = nullptr;
  std::unique_ptr<char[]> buffer_;  // stdio buffer of file_, large so that small writes are cheap
  int registry_slot_ = -1;          // slot of temp_path_ in the signal-time table, -1 if none
  bool committed_ = false;
  bool finished_ = false;  // finish_writing() ran: the data is on disk, the stream closed

  [[noreturn]] void fail(const char* what, int err);
  void close_quietly() noexcept;
};

// Unlinks every temporary file of every live AtomicFile. Async-signal-safe (it only reads a static
// table and calls unlink), for a SIGINT/SIGTERM handler that then calls _exit.
void remove_all_temp_files_for_signal() noexcept;

}  // namespace facegen
