// ordered_output.cpp: MPI-IO writes of every output format at the offsets of its one definition
// (see ordered_output.hpp).
#include "mpi/ordered_output.hpp"

#include <fcntl.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <stdexcept>

#include "common/clock.hpp"
#include "common/errors.hpp"
#include "common/model_shape.hpp"
#include "common/threads.hpp"
#include "files/commit_journal.hpp"
#include "files/input_file.hpp"
#include "files/mapped_write.hpp"
#include "files/path_parts.hpp"
#include "files/temp_registry.hpp"
#include "mpi/mpi_check.hpp"
#include "mpi/polite_wait.hpp"

namespace facegen {
namespace mpi {

constexpr int64_t kMaxWriteBytes = int64_t{1} << 30;  // MPI counts are ints

// A file system of one kernel's page cache (tmpfs, ext4, xfs, btrfs, overlayfs): every rank that
// sees the file there runs on the host that holds it, so its mapped writes and the other ranks' meet
// in one page cache. Elsewhere (NFS, Lustre, GPFS, BeeGFS) every byte goes through MPI-IO.
bool on_local_file_system(const std::string& path) {
  struct statfs fs;
  if (::statfs(path.c_str(), &fs) != 0) return false;
  switch (static_cast<unsigned long>(fs.f_type)) {
    case 0x01021994:  // tmpfs
    case 0xEF53:      // ext2, ext3, ext4
    case 0x58465342:  // xfs
    case 0x9123683E:  // btrfs
    case 0x794C7630:  // overlayfs (a container's root)
      return true;
    default: return false;
  }
}

// The output files of the job that this rank has open (or had: a finished mosaic file is closed, its
// entry kept for its byte count and temporary name). Files are opened together by every rank,
// a few at a time, when a round first needs them (open_files); rank 0 creates each just before.
// On a local file system a write of 256 KiB or more (npy runs, text pieces) may go through
// mapped_write() on a descriptor of the rank's own instead, so that ranks and their threads write one
// file at once: the rank's first rounds measure both ways (WriteWayTrial).
class MpiFiles : public FileWriter {
 public:
  explicit MpiFiles(bool serialize) : serialize_(serialize) {}
  ~MpiFiles() override {
    for (auto& [index, file] : files_) {
      if (file->fd >= 0) ::close(file->fd);
      // A file still open in MPI-IO (the job stopped half-way through opening) is closed by
      // MPI_Finalize, which removes the aside files through the folder's descriptor: kept for it.
      if (file->handle == MPI_FILE_NULL) close_folder(*file);
    }
  }

  // Collective over `comm`: rank 0 creates the files `wanted` (through `create`, which returns the
  // temporary path or throws), every rank learns their names and opens them. A failure anywhere
  // makes every rank broken() (nothing more is opened or written; the failed rank has it in `status`).
  void open_files(MPI_Comm comm, const std::vector<std::pair<size_t, OutputFile>>& wanted,
                  const std::function<std::string(size_t)>& create, RankStatus& status) {
    if (broken_ || wanted.empty()) return;
    int rank = 0;
    MPI_CHECK(MPI_Comm_rank(comm, &rank));
    // Rank 0's temporary names, one a line, after a flag: 1 created, 0 not (rank 0 says why).
    std::string joined = "1";
    if (rank == 0) {
      RankStatus creating;
      attempt(creating, [&] {
        for (const auto& [index, spec] : wanted) joined += create(index) + '\n';
      });
      if (creating.failed) {
        joined = "0";
        status.fail(creating.exit_code, creating.message);
      }
    }
    int64_t length = static_cast<int64_t>(joined.size());
    MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT64_T, 0, comm));
    joined.resize(static_cast<size_t>(length));
    MPI_CHECK(MPI_Bcast(joined.data(), static_cast<int>(length), MPI_CHAR, 0, comm));
    if (joined[0] != '1') {
      broken_ = true;
      return;
    }
    std::vector<OpenFile*> opened;
    {
      std::lock_guard<std::mutex> lock(files_mutex_);
      size_t start = 1;
      for (const auto& [index, spec] : wanted) {
        const size_t end = joined.find('\n', start);
        auto file = std::make_unique<OpenFile>();
        file->spec = spec;
        file->temp = joined.substr(start, end - start);
        start = end + 1;
        opened.push_back(file.get());
        files_[index] = std::move(file);
      }
    }
    // Every rank first tries the files itself (a node that lacks the output directory, or may not
    // write there, is the one rank that fails), and the ranks open them in MPI-IO only if all can.
    // Each rank opens its own handle (MPI_COMM_SELF): an open on the job's communicator is collective
    // inside, and when it fails on one rank alone (the outputs' folder removed between two ranks'
    // opens) that rank leaves while the others wait in the open's collectives, for ever; likewise
    // OpenMPI's "individual" shared-file-pointer component, which carries on without its files where
    // it could not create them ("Continuing anyway") and then skips the allgather of MPI_File_close
    // that the other ranks wait in. Every write is independent (MPI_File_write_at) and sync() puts
    // each rank's bytes on the storage before the barrier, so nothing needs a shared handle.
    // A rank that found its file also keeps the folder it found it in (an O_PATH descriptor) and
    // names the file to MPI-IO through it (/proc/self/fd/D/NAME): with the outputs' folder moved
    // away or replaced meanwhile, the open and OpenMPI's files beside it still land in that folder,
    // and the run fails at the commit, naming the change.
    stop_for_test("outputs-open");
    int usable = 1;
    for (OpenFile* file : opened) {
      const bool folder = file->spec.kind == OutputFile::Kind::Folder;
      file->dir = ::open(directory_of(file->temp).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
      const int fd = file->dir < 0 ? -1
                                   : ::openat(file->dir, base_name(file->temp).c_str(),
                                              (folder ? O_RDONLY | O_DIRECTORY : O_RDWR) | O_CLOEXEC);
      if (fd < 0) {
        const int err = errno;
        usable = 0;
        status.fail(1, "cannot open for writing " + file->spec.path + " (as " + file->temp + "): " + std::strerror(err));
        break;
      }
      ::close(fd);
      file->mappable = !folder && on_local_file_system(file->temp);
    }
    int all_tried = 0;
    MPI_CHECK(MPI_Allreduce(&usable, &all_tried, 1, MPI_INT, MPI_MIN, comm));
    if (!all_tried) {
      broken_ = true;  // the failed ranks say why at the next agreement
      return;
    }
    stop_for_test("outputs-checked");
    for (OpenFile* file : opened) {
      if (!usable || file->spec.kind == OutputFile::Kind::Folder) continue;
      // OpenMPI's "individual" shared-file-pointer component (rank_job.cpp says why it is the one)
      // keeps two files beside the file while it is open, named after the rank in the handle's
      // communicator: 0 on every rank, so the ranks share them and the first close removes them.
      // Listed, so that a signal's cleanup removes them too.
      for (const char* aside : {".data.0", ".metadata.0"}) {
        file->asides.push_back(register_temp_path(file->temp + aside, TempKind::File));
      }
      const std::string pinned = "/proc/self/fd/" + std::to_string(file->dir) + "/" + base_name(file->temp);
      const int code = MPI_File_open(MPI_COMM_SELF, pinned.c_str(), MPI_MODE_WRONLY, MPI_INFO_NULL, &file->handle);
      if (code != MPI_SUCCESS) usable = 0;
      attempt(status, [&] { check_file(code, "cannot open for writing", file->spec.path + " (as " + file->temp + ")"); });
    }
    int all_usable = 0;
    MPI_CHECK(MPI_Allreduce(&usable, &all_usable, 1, MPI_INT, MPI_MIN, comm));
    if (!all_usable) broken_ = true;  // the failed ranks say why at the next agreement
  }

  // Every rank, together (the numbered files of a round): closes them (MPI_File_close syncs).
  void close_files(const std::vector<size_t>& indices, RankStatus& status) {
    for (size_t index : indices) {
      OpenFile& file = find(index);
      attempt(status, [&] { close_descriptor(file); });
      if (file.handle == MPI_FILE_NULL) continue;
      const int code = MPI_File_close(&file.handle);
      file.asides.clear();  // removed by the close
      close_folder(file);
      attempt(status, [&] { check_file(code, "cannot write", file.spec.path); });
    }
  }

  bool broken() const { return broken_; }
  bool is_open(size_t index) const {
    std::lock_guard<std::mutex> lock(files_mutex_);
    return files_.count(index) != 0;
  }

  // Whether large writes go through mapped_write (the rank's WriteWayTrial decides); off at first.
  void use_mapped_writes(bool on) { mapped_writes_ = on; }

  void write_at(size_t index, int64_t offset, const void* data, int64_t bytes) override {
    OpenFile& file = find(index);
    if (bytes >= kMappedWriteMinBytes && mapped_writes_.load(std::memory_order_relaxed) && file.mappable.load()) {
      int err = 0;
      const MappedWrite mapped = mapped_write(descriptor(file), offset, data, bytes, &err);
      if (mapped == MappedWrite::Failed) {
        throw UserError("cannot write " + file.spec.path + ": " + std::strerror(err) +
                        (err == EFBIG ? " (the file size limit, ulimit -f)" : ""));
      }
      if (mapped == MappedWrite::Done) {
        file.bytes += bytes;
        return;
      }
      file.mappable = false;  // Unsupported: MPI-IO from now on
    }
    std::unique_lock<std::mutex> lock(mpi_mutex_, std::defer_lock);
    if (serialize_) lock.lock();
    const char* from = static_cast<const char*>(data);
    while (bytes > 0) {
      const int64_t piece = std::min(bytes, kMaxWriteBytes);
      MPI_Status mpi_status;
      check_file(MPI_File_write_at(file.handle, offset, from, static_cast<int>(piece), MPI_BYTE, &mpi_status),
                 "cannot write", file.spec.path);
      file.bytes += piece;
      offset += piece;
      from += piece;
      bytes -= piece;
    }
  }
  const std::string& temp_path(size_t index) override { return find(index).temp; }
  void add_bytes(size_t index, int64_t bytes) override { find(index).bytes += bytes; }

  // Bytes this rank wrote into files [begin, end), headers included on `with_headers`; not pixel files.
  int64_t bytes(size_t begin, size_t end, bool with_headers) const {
    std::lock_guard<std::mutex> lock(files_mutex_);
    int64_t sum = 0;
    for (auto it = files_.lower_bound(begin); it != files_.end() && it->first < end; ++it) {
      if (it->second->spec.kind == OutputFile::Kind::Pixels) continue;
      sum += it->second->bytes.load();
      if (with_headers) sum += static_cast<int64_t>(it->second->spec.header.size());
    }
    return sum;
  }

  // Collective: every byte of the open files reaches the storage, so that any rank may read it back.
  void sync(MPI_Comm comm, RankStatus& status) {
    for (auto& [index, file] : files_) {
      attempt(status, [&] { sync_descriptor(*file); });
      if (file->handle == MPI_FILE_NULL) continue;
      const int code = MPI_File_sync(file->handle);
      attempt(status, [&] { check_file(code, "cannot write", file->spec.path); });
    }
    MPI_CHECK(MPI_Barrier(comm));
  }

  // Collective: closes what is open.
  void close() {
    for (auto& [index, file] : files_) {
      std::lock_guard<std::mutex> lock(file->fd_mutex);
      if (file->fd >= 0) ::close(file->fd);  // synced by sync(), or the run failed
      file->fd = -1;
      if (file->handle != MPI_FILE_NULL) MPI_CHECK(MPI_File_close(&file->handle));
      file->asides.clear();
      close_folder(*file);
    }
  }

 private:
  struct OpenFile {
    OutputFile spec;
    std::string temp;
    MPI_File handle = MPI_FILE_NULL;  // none for a folder, nor once closed
    std::atomic<int64_t> bytes{0};
    std::vector<TempRegistration> asides;  // MPI-IO's own files beside it while it is open
    std::atomic<bool> mappable{false};     // a local file system, and mapped_write not Unsupported there
    std::mutex fd_mutex;                   // guards fd
    int fd = -1;                           // this rank's own, opened by the first mapped write
    int dir = -1;                          // O_PATH: the folder this rank found it in (open_files)
  };
  static void close_folder(OpenFile& file) {
    if (file.dir >= 0) ::close(file.dir);
    file.dir = -1;
  }
  // The rank's descriptor of `file` for mapped writes, opened by the first: a mosaic's many small
  // files never hold one.
  static int descriptor(OpenFile& file) {
    std::lock_guard<std::mutex> lock(file.fd_mutex);
    if (file.fd < 0) {
      file.fd = ::open(file.temp.c_str(), O_RDWR | O_CLOEXEC);
      if (file.fd < 0) {
        const int err = errno;
        throw UserError("cannot open for writing " + file.spec.path + " (as " + file.temp + "): " + std::strerror(err));
      }
    }
    return file.fd;
  }
  // Its mapped writes reach the storage (MPI_File_sync need not sync another descriptor's pages).
  static void sync_descriptor(OpenFile& file) {
    std::lock_guard<std::mutex> lock(file.fd_mutex);
    if (file.fd >= 0 && ::fdatasync(file.fd) != 0 && errno != EINVAL) {
      const int err = errno;
      throw UserError("cannot write " + file.spec.path + ": " + std::strerror(err));
    }
  }
  static void close_descriptor(OpenFile& file) {
    sync_descriptor(file);
    std::lock_guard<std::mutex> lock(file.fd_mutex);
    if (file.fd >= 0 && ::close(file.fd) != 0) {
      const int err = errno;
      file.fd = -1;
      throw UserError("cannot write " + file.spec.path + ": " + std::strerror(err));
    }
    file.fd = -1;
  }
  OpenFile& find(size_t index) {
    std::lock_guard<std::mutex> lock(files_mutex_);
    auto found = files_.find(index);
    if (found == files_.end()) throw std::logic_error("MPI output: file " + std::to_string(index) + " is not open");
    return *found->second;
  }

  bool serialize_;  // MPI without MPI_THREAD_MULTIPLE: one MPI call at a time
  bool broken_ = false;
  std::atomic<bool> mapped_writes_{false};
  std::mutex mpi_mutex_;
  mutable std::mutex files_mutex_;  // guards the map, not the files
  std::map<size_t, std::unique_ptr<OpenFile>> files_;
};

namespace {

// One layout's files within the job's list: the layout numbers its files from 0.
class LayoutFiles : public FileWriter {
 public:
  LayoutFiles(FileWriter& all, size_t first) : all_(all), first_(first) {}
  void write_at(size_t file, int64_t offset, const void* data, int64_t bytes) override {
    all_.write_at(first_ + file, offset, data, bytes);
  }
  const std::string& temp_path(size_t file) override { return all_.temp_path(first_ + file); }
  void add_bytes(size_t file, int64_t bytes) override { all_.add_bytes(first_ + file, bytes); }

 private:
  FileWriter& all_;
  size_t first_;
};

}  // namespace

OrderedOutputs::OrderedOutputs(MPI_Comm comm, std::string prefix, std::vector<OutputFormat> formats,
                               int64_t total_images, SinkOptions options, int64_t round_images)
    : comm_(comm), prefix_(std::move(prefix)), formats_(std::move(formats)), total_(total_images),
      options_(std::move(options)), round_images_(std::max<int64_t>(1, round_images)),
      encoding_(image_encoding_for(formats_)) {
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &ranks_));
  MPI_CHECK(MPI_Comm_dup(comm_, &write_comm_));
  int level = 0;
  MPI_CHECK(MPI_Query_thread(&level));
  threaded_ = level == MPI_THREAD_MULTIPLE;
  options_.threads = resolve_threads(options_.threads);
}

OrderedOutputs::~OrderedOutputs() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (writer_.joinable()) writer_.join();
  MPI_Comm_free(&write_comm_);
  // rank 0's OutputFiles removes what was not committed
}

std::vector<std::string> OrderedOutputs::final_paths() const {
  std::vector<std::string> paths;
  for (const OutputLayout& layout : layouts_) paths.push_back(layout.describe());
  return paths;
}

void OrderedOutputs::prepare(RankStatus& status) {
  attempt(status, [&] {
    OutputOptions layout_options = output_options(options_);
    if (rank_ != 0) layout_options.on_notice = nullptr;
    for (OutputFormat format : formats_) {
      layouts_.emplace_back(format, prefix_, total_, layout_options);
      first_file_.push_back(file_count_);
      file_count_ += layouts_.back().file_count();
    }
  });
}

OutputFile OrderedOutputs::job_file(size_t index) const {
  size_t l = layouts_.size();
  while (l > 0 && first_file_[l - 1] > index) --l;
  if (l == 0 || index >= file_count_) throw std::out_of_range("MPI output: no file " + std::to_string(index));
  return layouts_[l - 1].file(index - first_file_[l - 1]);
}

void OrderedOutputs::create() {
  if (rank_ != 0) return;
  // A commit of an earlier run into this directory that a kill cut short is finished first.
  for (const std::string& sentence : finish_dead_commits(directory_of(prefix_))) {
    if (options_.on_notice) options_.on_notice(sentence);
  }
  created_ = std::make_unique<OutputFiles>(FileList{file_count_, [this](size_t i) { return job_file(i); }});
  // The first file of each output now, so that a directory that cannot take it fails before any
  // computing; the others (numbered mosaics) when a round first reaches them.
  for (size_t first : first_file_) created_->create(first);
}

void OrderedOutputs::open_job_files(const std::vector<size_t>& indices, RankStatus& status) {
  std::vector<std::pair<size_t, OutputFile>> wanted;
  for (size_t index : indices) {
    if (!files_->is_open(index)) wanted.emplace_back(index, job_file(index));
  }
  files_->open_files(write_comm_, wanted, [this](size_t index) { return created_->create(index); }, status);
}

void OrderedOutputs::open(RankStatus& status) {
  files_ = std::make_unique<MpiFiles>(!threaded_);
  open_job_files(first_file_, status);
  for (const OutputLayout& layout : layouts_) record_ends_.push_back(std::make_unique<RecordEnds>(layout));
  for (int b = 0; b < 2; ++b) {
    storage_.emplace_back(new char[static_cast<size_t>(round_images_ * image_bytes(encoding_, options_.image_channels))]);
    free_.push_back(storage_.back().get());
  }
  if (threaded_) writer_ = std::thread(&OrderedOutputs::writer_loop, this);
}

void* OrderedOutputs::next_buffer() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !free_.empty(); });
  void* buffer = free_.back();
  free_.pop_back();
  return buffer;
}

void OrderedOutputs::submit_round(void* buffer, ImageRange all, ImageRange slice, const RankStatus& status) {
  const Round round{buffer, all, slice, status.failed};
  if (!threaded_) {
    write_round(round);
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(buffer);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(round);
  }
  changed_.notify_all();
}

void OrderedOutputs::writer_loop() {
  for (;;) {
    Round round;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return !queue_.empty() || stopping_; });
      if (stopping_) return;  // finish() has drained the queue on every path that goes on with MPI
      round = queue_.front();
    }
    write_round(round);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.pop_front();
      free_.push_back(round.buffer);
    }
    changed_.notify_all();
  }
}

void OrderedOutputs::write_round(const Round& round) {
  const auto start = Clock::now();
  RankStatus status;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    status = writer_status_;
  }
  // The round's numbered files (mosaics, shards), opened together by every rank (rank 0 creates them)
  // as it first reaches them, and closed once the round has written their last images.
  std::vector<size_t> numbered_files, finished;
  for (size_t l = 0; l < layouts_.size(); ++l) {
    const OutputLayout& layout = layouts_[l];
    if (layout.format() == OutputFormat::Text || layout.format() == OutputFormat::Png) continue;
    const size_t step = layout.format() == OutputFormat::MosaicPng ? 2 : 1;  // a PNG is made at finish()
    const auto [begin, end] = layout.files_of(round.all.begin, round.all.size());
    for (size_t f = begin; f < end; f += step) {
      numbered_files.push_back(first_file_[l] + f);
      const OutputFile file = layout.file(f);
      if (file.first + file.count <= round.all.end) finished.push_back(first_file_[l] + f);
    }
  }
  open_job_files(numbered_files, status);
  const bool skip = round.skip || status.failed || files_->broken();
  const int64_t count = skip ? 0 : round.slice.size();
  files_->use_mapped_writes(write_way_.mapped_now());
  const int64_t bytes_before = bytes_written();
  const auto writing = Clock::now();
  for (size_t l = 0; l < layouts_.size(); ++l) {
    const OutputLayout& layout = layouts_[l];
    LayoutFiles out(*files_, first_file_[l]);
    if (!layout.writes_records()) {
      attempt(status, [&] {
        layout.write_run_threaded(buffer_run(round.buffer), round.slice.begin, count, out, options_.threads);
      });
      continue;
    }
    // Records (txt, tar): every rank takes part in the exchange of byte counts per file of the round
    // exactly once, whatever happens; a rank's records go after those of the ranks before it.
    const auto files = layout.files_of(round.all.begin, round.all.size());
    bool placed = false;
    auto place = [&](const std::vector<int64_t>& bytes) {
      placed = true;
      const int n = static_cast<int>(bytes.size());
      std::vector<int64_t> before(bytes.size(), 0), round_bytes(bytes.size(), 0);
      MPI_Request requests[2];
      MPI_CHECK(MPI_Iexscan(bytes.data(), before.data(), n, MPI_INT64_T, MPI_SUM, write_comm_, &requests[0]));
      MPI_CHECK(MPI_Iallreduce(bytes.data(), round_bytes.data(), n, MPI_INT64_T, MPI_SUM, write_comm_, &requests[1]));
      wait_politely(&requests[0]);  // the ranks that finished their slice first wait here
      wait_politely(&requests[1]);
      if (rank_ == 0) std::fill(before.begin(), before.end(), 0);  // MPI_Exscan leaves rank 0's undefined
      return record_ends_[l]->place(files, before, round_bytes);
    };
    const int64_t record_count = status.failed ? 0 : count;
    attempt(status, [&] {
      write_record_run(layout, buffer_run(round.buffer), round.slice.begin, record_count, files, options_.threads,
                       record_blocks_, place, out);
    });
    if (!placed) place(std::vector<int64_t>(files.second - files.first, 0));
  }
  write_way_.ran(bytes_written() - bytes_before, seconds_since(writing));
  if (!files_->broken()) files_->close_files(finished, status);
  std::lock_guard<std::mutex> lock(mutex_);
  if (status.failed) writer_status_.fail(status.exit_code, status.message);
  write_seconds_ += seconds_since(start);
}

void OrderedOutputs::collect_errors(RankStatus& status) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (writer_status_.failed) status.fail(writer_status_.exit_code, writer_status_.message);
}

void OrderedOutputs::finish(RankStatus& status) {
  if (!files_) return;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return queue_.empty(); });
  }
  collect_errors(status);
  // Whether every rank may go on to encode; the caller's agreement then says who failed and why.
  int failed_here = status.failed ? 1 : 0;
  int failed_anywhere = 0;
  MPI_CHECK(MPI_Allreduce(&failed_here, &failed_anywhere, 1, MPI_INT, MPI_LOR, comm_));
  if (!failed_anywhere) {
    const auto start = Clock::now();
    files_->sync(comm_, status);
    encode_mosaic_pngs(status);
    files_->sync(comm_, status);
    // Per-image PNGs were written by plain writes: each rank syncs its host's view of them.
    for (size_t l = 0; l < layouts_.size(); ++l) {
      if (layouts_[l].format() != OutputFormat::Png || rank_ == 0) continue;
      attempt(status, [&] {
        const OutputFile folder = layouts_[l].file(0);
        const int dir = ::open(files_->temp_path(first_file_[l]).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dir < 0 || ::syncfs(dir) != 0) {
          const int err = errno;
          if (dir >= 0) ::close(dir);
          throw UserError("writing " + folder.path + " failed: " + std::strerror(err));
        }
        ::close(dir);
      });
    }
    std::lock_guard<std::mutex> lock(mutex_);
    write_seconds_ += seconds_since(start);
  }
  files_->close();
}

// Mosaic PNGs, `ranks` at a time: rank 0 creates their files, all open them, rank r encodes the r-th
// of the batch (mosaic files r, r + ranks, ... of the job), and all close them.
void OrderedOutputs::encode_mosaic_pngs(RankStatus& status) {
  std::vector<std::pair<size_t, size_t>> mosaics;  // (layout, pixel file) of every mosaic PNG
  for (size_t l = 0; l < layouts_.size(); ++l) {
    if (layouts_[l].format() != OutputFormat::MosaicPng) continue;
    for (size_t f = 0; f < layouts_[l].file_count(); f += 2) mosaics.emplace_back(l, f);
  }
  for (size_t batch = 0; batch < mosaics.size(); batch += static_cast<size_t>(ranks_)) {
    const size_t end = std::min(mosaics.size(), batch + static_cast<size_t>(ranks_));
    std::vector<size_t> pngs;
    for (size_t m = batch; m < end; ++m) pngs.push_back(first_file_[mosaics[m].first] + mosaics[m].second + 1);
    open_job_files(pngs, status);
    if (files_->broken()) return;
    const size_t mine = batch + static_cast<size_t>(rank_);
    if (mine < end) {
      const auto [l, pixels] = mosaics[mine];
      LayoutFiles out(*files_, first_file_[l]);
      attempt(status, [&] { layouts_[l].encode_png(pixels, out, options_.threads); });
    }
    files_->close_files(pngs, status);
  }
}

void OrderedOutputs::commit() {
  if (rank_ != 0) return;
  created_->finish();
  commit_all_or_nothing(created_->renames());
  created_->mark_committed();
}

double OrderedOutputs::write_seconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return write_seconds_;
}

std::vector<int64_t> OrderedOutputs::bytes_per_format() const {
  std::vector<int64_t> bytes;
  for (size_t l = 0; l < layouts_.size(); ++l) {
    const size_t begin = first_file_[l];
    bytes.push_back(files_ ? files_->bytes(begin, begin + layouts_[l].file_count(), rank_ == 0) : 0);
  }
  return bytes;
}

int64_t OrderedOutputs::bytes_written() const {
  int64_t sum = 0;
  for (int64_t b : bytes_per_format()) sum += b;
  return sum;
}

}  // namespace mpi
}  // namespace facegen
