// input_file.hpp: an input of the run (the latent file, the model file) opened once and read through
// that one descriptor by every reader and thread.
//
// A regular file is read with pread at offsets, so threads share the descriptor; a pipe or other
// stream is read in order with read, by one reader. Nothing reopens the path: a file that is deleted,
// or that another file is renamed over (as editors and sync tools save), while the run goes on does not
// change what the run reads; it keeps reading the file it opened. A file changed in place does: its size
// and modification time (to the nanosecond) are taken at the open, a regular file is read no further
// than the size it had then, and a read that ends sooner, or check_unchanged() after the last read (the
// readers' finish), reports "latent file PATH changed while it was read (N bytes when opened, M now)", a
// UserError. The same size with a new modification time counts as changed too (rewritten in place):
// which bytes the readers saw, old or new, cannot be told. A change within the file system's timestamp
// granularity that keeps the size is not seen.
//
// For tests, FACEGEN_TEST_STOP=RANK:POINT[,RANK:POINT...] makes the process of that rank (0 for a single
// process; under mpirun its OMPI_COMM_WORLD_RANK or PMIX_RANK) stop itself with SIGSTOP at POINT, once,
// so that a test can change the file at a known moment and continue the process with SIGCONT:
//   latents-open, model-open       before the file is opened
//   latents-opened, model-opened   after it is opened, before any of its bytes is read
//   latents-read                   after the first images were read from the latent file
//   outputs-open, outputs-checked  an MPI rank, before it makes its first output files (rank 0
//                                  first), and once it made them (mpi/rank_job.cpp)
// Nothing else reads it.
#pragma once

#include <cstdint>
#include <string>

#include "common/content_hash.hpp"
#include "common/errors.hpp"

namespace facegen {

enum class InputKind { Latents, Model };

// What identifies the file behind a descriptor, as fstat gives it.
struct FileIdentity {
  int64_t device = 0;
  int64_t inode = 0;
  int64_t bytes = -1;        // -1: not a regular file
  int64_t modified_ns = 0;   // st_mtim in nanoseconds since the epoch
  int64_t fs_type = 0;       // statfs's f_type of its file system, at the open (0: unknown)
};

class InputFile {
 public:
  // Throws UserError ("cannot open latent file PATH: ...", "... model file ...").
  InputFile(const std::string& path, InputKind kind);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const { return path_; }
  std::string what() const;  // "latent file PATH", "model file PATH": for messages
  bool regular() const { return identity_.bytes >= 0; }
  bool directory() const { return directory_; }
  int64_t bytes() const { return identity_.bytes; }  // at the open; -1 for a stream
  const FileIdentity& identity() const { return identity_; }  // at the open

  // Exactly `bytes` bytes at `offset` of a regular file, within its size at the open; a file that now
  // ends sooner is reported as changed. Any thread.
  void read_at(int64_t offset, int64_t bytes, char* dst) const;
  // Up to `max` bytes: of a regular file those at `offset`, no further than its size at the open; of a
  // stream the next ones (`offset` is not used). Returns how many; 0 at the end.
  int64_t read_some(int64_t offset, int64_t max, char* dst) const;

  // Throws the UserError above if the size or the modification time is no longer the open's (nothing
  // for a stream).
  void check_unchanged() const;

  // The content hash (common/content_hash.hpp) of every byte of a regular file as opened, read through
  // this descriptor (a file that now ends sooner is reported as changed). Any thread.
  ContentDigest digest() const;

  // Runs read() and returns what it returns; a UserError it throws (a parse error of bytes that changed
  // under the reader) gives way to the change's own message when the file changed since the open.
  template <class Read>
  auto blame_change(Read&& read) const -> decltype(read()) {
    try {
      return read();
    } catch (const UserError&) {
      check_unchanged();
      throw;
    }
  }

 private:
  [[noreturn]] void throw_changed(const FileIdentity& now) const;
  FileIdentity identity_now() const;

  std::string path_;
  InputKind kind_;
  int fd_ = -1;
  bool directory_ = false;
  FileIdentity identity_;
};

// The test hook above: stops this process at `point` if FACEGEN_TEST_STOP names it for this rank.
void stop_for_test(const char* point);

}  // namespace facegen
