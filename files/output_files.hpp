// output_files.hpp: the temporary files of a run's outputs, made by this process, and positioned
// writes into them from any number of threads: the single-process driver of output_format.hpp's
// definitions (an MPI job's rank 0 uses it to create the files, which every rank then writes).
//
// Each file is created beside its final path as an unbuffered AtomicFile (a folder with mkdtemp as
// PREFIX.tmp-XXXXXX), its header written and its size set up front, so a missing or read-only
// directory fails before any computing and a mosaic's black tiles read as zeros. write_at() is
// pwrite on a descriptor opened on first use; a fixed-size file is synced and closed as soon as its
// last image is in, so a mosaic split into many files holds few descriptors. finish() syncs the rest
// (syncfs once for a folder); renames() then lists what commit_all_or_nothing() moves into place.
// Destroyed before commit, it removes every file and folder it made.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "files/atomic_file.hpp"
#include "files/output_commit.hpp"
#include "files/output_format.hpp"
#include "files/temp_registry.hpp"

namespace facegen {

class OutputFiles : public FileWriter {
 public:
  // Throws UserError naming the path (directory missing or not writable, disk full, a folder or
  // file of the final name in the way).
  explicit OutputFiles(std::vector<OutputFile> files);
  ~OutputFiles() override;
  OutputFiles(const OutputFiles&) = delete;
  OutputFiles& operator=(const OutputFiles&) = delete;

  void write_at(size_t file, int64_t offset, const void* data, int64_t bytes) override;
  const std::string& temp_path(size_t file) const override { return slots_[file].temp; }
  void add_bytes(size_t file, int64_t bytes) override { slots_[file].bytes += bytes; }
  void file_complete(size_t file) override;

  const std::vector<OutputFile>& files() const { return files_; }
  int64_t bytes_written() const;  // headers and every write, but not into scratch pixel files

  void finish();                               // every byte on disk
  std::vector<PendingRename> renames() const;  // data, folders and PNGs; not the pixel files
  void mark_committed();                       // the renames happened: nothing left to remove

 private:
  struct Slot {
    std::unique_ptr<AtomicFile> file;  // a file (none for a folder)
    TempRegistration listed;           // a folder, listed for a signal's cleanup
    std::string temp;                  // the temporary file or folder
    std::mutex mutex;                  // guards fd
    int fd = -1;
    bool done = false;                 // synced and closed: every image is in
    std::atomic<int64_t> data_left{-1};  // bytes of images still to come, for fixed-size files
    std::atomic<int64_t> bytes{0};       // written so far
  };
  int descriptor(size_t file);  // with the slot's mutex held
  void write_bytes(size_t file, int64_t offset, const void* data, int64_t bytes);
  void remove_uncommitted() noexcept;
  void sync_and_close(size_t file, Slot& slot);  // with slot.mutex held; a pixel file is only closed
  [[noreturn]] void fail(size_t file, int err) const;

  std::vector<OutputFile> files_;
  std::unique_ptr<Slot[]> slots_;
  bool committed_ = false;
};

}  // namespace facegen
