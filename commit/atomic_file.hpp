// atomic_file.hpp: an output file that appears complete or not at all.
//
// Writes go to a temporary file beside the final path (same directory, so rename is atomic);
// commit() flushes, fsyncs and renames it over the final path. If the object is destroyed before
// commit() (an error, an exception), the temporary file is removed and an existing file of the final
// name is left untouched. Every failure (directory missing or not writable, disk full) is a UserError
// naming the path and the system's reason.
//
// The temporary file is <final>.tmp-XXXXXX (mkstemp), mode 0644 less the umask. It is listed in the
// process's temporary-file registry (temp_registry.hpp), so that a signal that ends the process
// removes it too.
#pragma once

#include <cstddef>
#include <cstdio>
#include <memory>
#include <string>

#include "common/temp_registry.hpp"

namespace facegen {

class AtomicFile {
 public:
  explicit AtomicFile(std::string final_path);
  // Unbuffered: the file is created (and listed) but not kept open; its owner writes it through
  // descriptors of its own (pwrite, MPI-IO) and syncs it. write() is then refused; commit() renames.
  struct Unbuffered {};
  AtomicFile(std::string final_path, Unbuffered);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);  // throws UserError on a write failure (disk full)
  void commit();   // flush, fsync, close, rename over the final path; throws UserError
  // Flush, fsync and close now, keeping the temporary file for a later commit() (which then only
  // renames): a finished file of many holds no buffer nor descriptor while the others are written.
  void finish_writing();
  void abandon();  // remove the temporary file now; the object can no longer be written
  // The owner renamed temp_path() into place itself (one commit of several files): forget the file.
  void mark_committed();

  const std::string& final_path() const { return final_path_; }
  const std::string& temp_path() const { return temp_path_; }
  bool committed() const { return committed_; }

 private:
  std::string final_path_;
  std::string temp_path_;
  std::FILE* file_ = nullptr;
  std::unique_ptr<char[]> buffer_;  // stdio buffer of file_, large so that small writes are cheap
  TempRegistration listed_;         // temp_path_ in the registry until the rename or removal
  bool committed_ = false;
  bool finished_ = false;  // finish_writing() ran: the data is on disk, the stream closed

  [[noreturn]] void fail(const char* what, int err);
  void close_quietly() noexcept;
};

}  // namespace facegen
