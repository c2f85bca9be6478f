// output_files.hpp: the temporary files of a run's outputs, made by this process, and positioned
// writes into them from any number of threads: the single-process driver of output_format.hpp's
// definitions (an MPI job's rank 0 uses it to create the files, which every rank then writes).
//
// The files are known by number and computed on demand (a FileList), and each is created when it is
// first needed: by create(), which the owner calls for the first file of each output so that a missing
// or read-only directory fails before any computing, or by the first write into it. So a run holds an
// entry only for the files it has actually begun, never one per numbered mosaic file that N calls for.
//
// Each file is created beside its final path as an unbuffered AtomicFile (a folder with mkdtemp as
// PREFIX.tmp-XXXXXX, whose files are created relative to its held descriptor), its header written and
// its size set up front, so a mosaic's black tiles read as zeros. write_at() is pwrite on a descriptor
// opened on first use (a tar, npy or npy-u8 file's whole blocks with O_DIRECT where that pays:
// engine/direct_write.hpp) (the engine writes a file from one
// thread at a time: engine/output_engine.hpp); a file of images (fixed-size, or a tar shard's records) is synced and closed as soon as its last
// image is in (images_written), so a mosaic or an output split into many shards holds few
// descriptors. An output of kSyncAtOnceFiles files or more closes its files unsynced and finish() syncs them all with one syncfs (4,000 one-tile BMPs on ext4 of a
// 2-core VM: 2.64 s with an fsync each, 1.48 s so). finish() syncs the rest (syncfs once for a
// folder); renames() then lists what
// commit_all_or_nothing() moves into place. Destroyed before commit, it removes every file and folder
// it made. With --resume (place_when_complete) each file goes into place as soon as its last byte is
// in, and a folder's files in groups (place_in_folder); nothing is left for a commit.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "commit/atomic_file.hpp"
#include "commit/output_commit.hpp"
#include "engine/direct_write.hpp"
#include "formats/output_format.hpp"
#include "common/temp_registry.hpp"

namespace facegen {

// Files 0 .. count - 1 of one or more outputs, each computed by `at` when needed.
struct FileList {
  size_t count = 0;
  std::function<OutputFile(size_t)> at;
};

constexpr size_t kSyncAtOnceFiles = 8;

class OutputFiles : public FileWriter {
 public:
  explicit OutputFiles(FileList files);  // creates nothing yet
  ~OutputFiles() override;
  OutputFiles(const OutputFiles&) = delete;
  OutputFiles& operator=(const OutputFiles&) = delete;

  // Creates file `file` now, if it is not yet: its temporary, header and size. Returns its temporary
  // path. Throws UserError naming the path (directory missing or not writable, disk full, a folder or
  // file of the final name in the way).
  const std::string& create(size_t file);

  void write_at(size_t file, int64_t offset, const void* data, int64_t bytes) override;
  const std::string& temp_path(size_t file) override { return create(file); }
  // A file of the folder `file`, created relative to its held descriptor (engine/folder_files.hpp):
  // no lock and no walk of the folder's path per file.
  void write_in_folder(size_t file, const std::string& name, const std::string& shown,
                       std::string_view bytes) override;
  void add_bytes(size_t file, int64_t bytes) override { folder_slot(file).bytes += bytes; }
  void images_written(size_t file, int64_t count) override;
  void file_complete(size_t file) override;

  // The files [begin, end) are this process's to make (an MPI rank's share of the job); finish() then
  // wants only those. By default all of them.
  void own_only(size_t begin, size_t end) { owned_ = {begin, end}; }
  // File `file` is a folder that another process made (an MPI job's folder of PNGs, made by rank 0):
  // this one writes into it, and never renames nor removes it.
  void adopt_folder(size_t file, const std::string& temp);

  // --resume: each file is put in place as soon as its last image is in: synced, checked as the
  // commit checks what it replaces (existing_outputs.hpp), renamed over its final name, the folder
  // synced; then `placed(file)` is told, on that thread. A folder's files go by place_in_folder().
  // finish() then has nothing to sync or rename: renames() is empty. Call before any file is made.
  void place_when_complete(std::function<void(size_t file)> placed) { placed_ = std::move(placed); }
  // --resume: the files `names` of the folder `file` (paths inside it: "000042.png", "000/000042.png"),
  // each complete in its temporary folder, synced (one syncfs) and renamed into the final folder (made
  // where it is missing, and its subfolders), which is then synced.
  void place_in_folder(size_t file, const std::vector<std::string>& names);


  size_t created_count() const;
  int64_t bytes_written() const;  // headers and every write, but not into scratch pixel files

  void finish();                               // every byte on disk
  std::vector<PendingRename> renames() const;  // data, folders and PNGs; not the pixel files
  void mark_committed();                       // the renames happened: nothing left to remove

 private:
  struct Slot {
    OutputFile spec;
    std::unique_ptr<AtomicFile> file;  // a file (none for a folder)
    TempRegistration listed;           // a folder, listed for a signal's cleanup
    std::string temp;                  // the temporary file or folder
    std::mutex mutex;                  // guards fd
    int fd = -1;
    int dir_fd = -1;                   // a folder: its descriptor, held from its creation
    int direct_fd = -1;                // with fd, where its writes go past the page cache (O_DIRECT)
    DirectAlignment direct;            // and what they must be aligned to
    bool done = false;                 // synced and closed: every image is in
    std::atomic<int64_t> images_left{-1};  // images still to come, for fixed-size files
    std::atomic<int64_t> bytes{0};         // written so far
    bool adopted = false;                  // another process's folder (adopt_folder)
    size_t index = 0;                      // its number
  };
  Slot& slot(size_t file);  // created if need be
  Slot& folder_slot(size_t file);  // the same, without a lock where `file` is the folder made last
  void open_folder(Slot& slot);    // slot.dir_fd, from slot.temp
  void make(size_t file, Slot& slot);
  int descriptor(Slot& slot);  // with the slot's mutex held
  void open_direct_if_wanted(Slot& slot);  // with fd just opened
  void close_direct(Slot& slot);
  void write_bytes(Slot& slot, int64_t offset, const void* data, int64_t bytes);
  void remove_uncommitted() noexcept;
  void sync_and_close(Slot& slot);  // with slot.mutex held; a pixel file is only closed
  [[noreturn]] static void fail(const Slot& slot, int err);

  FileList files_;
  std::pair<size_t, size_t> owned_{0, SIZE_MAX};  // the files finish() wants made
  mutable std::mutex slots_mutex_;                       // guards the map (not the slots)
  std::map<size_t, std::unique_ptr<Slot>> slots_;        // the files created so far, by number
  bool committed_ = false;
  // An output of kSyncAtOnceFiles files or more (a mosaic split): a descriptor of its first file,
  // opened before anything is written, whose syncfs in finish() syncs every file closed unsynced
  // (unsynced_) at once and reports any writeback error on the file system since (Linux 5.8 and
  // later). Fewer files are each fsynced: syncfs also writes other programs' data.
  int sync_fd_ = -1;
  std::atomic<bool> unsynced_{false};
  std::function<void(size_t)> placed_;  // --resume (place_when_complete)
  std::atomic<Slot*> folder_{nullptr};  // the folder made last (a folder of PNGs: the only one)
};

}  // namespace facegen
