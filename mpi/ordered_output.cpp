// ordered_output.cpp: MPI-IO writes of every output format at the offsets of its one definition
// (see ordered_output.hpp).
#include "mpi/ordered_output.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "common/clock.hpp"
#include "common/errors.hpp"
#include "common/model_shape.hpp"
#include "common/threads.hpp"
#include "mpi/mpi_check.hpp"
#include "mpi/polite_wait.hpp"

namespace facegen {
namespace mpi {

constexpr int64_t kMaxWriteBytes = int64_t{1} << 30;  // MPI counts are ints

// Every output file of the job, opened on this rank with MPI_File_open (folders: their path only).
class MpiFiles : public FileWriter {
 public:
  MpiFiles(std::vector<OutputFile> files, std::vector<std::string> temps, bool serialize)
      : files_(std::move(files)), temps_(std::move(temps)), handles_(files_.size(), MPI_FILE_NULL),
        bytes_(new std::atomic<int64_t>[files_.size()]), serialize_(serialize) {
    for (size_t i = 0; i < files_.size(); ++i) bytes_[i] = 0;
  }

  // Collective. Opens every file; errors go into `status`.
  void open(MPI_Comm comm, RankStatus& status) {
    // MPI_File_open is collective: a rank whose open fails returns while the others go on into the
    // open's own collectives, and the job hangs. On one host the ranks see the same directories, but
    // a node that lacks the output directory (or may not write there) is the one rank that fails.
    // So every rank first tries the files itself, and the ranks open them together only if all can.
    int usable = 1;
    for (size_t i = 0; i < files_.size() && usable; ++i) {
      const bool folder = files_[i].kind == OutputFile::Kind::Folder;
      const int fd = ::open(temps_[i].c_str(), (folder ? O_RDONLY | O_DIRECTORY : O_WRONLY) | O_CLOEXEC);
      if (fd < 0) {
        const int err = errno;
        usable = 0;
        attempt(status, [&] {
          throw UserError("cannot open for writing " + files_[i].path + " (as " + temps_[i] + "): " + std::strerror(err));
        });
      } else {
        ::close(fd);
      }
    }
    int all_usable = 0;
    MPI_CHECK(MPI_Allreduce(&usable, &all_usable, 1, MPI_INT, MPI_MIN, comm));
    if (!all_usable) return;  // the failed ranks say why at the next agreement
    for (size_t i = 0; i < files_.size(); ++i) {
      if (files_[i].kind == OutputFile::Kind::Folder) continue;
      const int code = MPI_File_open(comm, temps_[i].c_str(), MPI_MODE_WRONLY, MPI_INFO_NULL, &handles_[i]);
      attempt(status, [&] {
        check_file(code, "cannot open for writing", files_[i].path + " (as " + temps_[i] + ")");
      });
    }
  }

  void write_at(size_t file, int64_t offset, const void* data, int64_t bytes) override {
    std::unique_lock<std::mutex> lock(mutex_, std::defer_lock);
    if (serialize_) lock.lock();
    const char* from = static_cast<const char*>(data);
    while (bytes > 0) {
      const int64_t piece = std::min(bytes, kMaxWriteBytes);
      MPI_Status mpi_status;
      check_file(MPI_File_write_at(handles_[file], offset, from, static_cast<int>(piece), MPI_BYTE, &mpi_status),
                 "cannot write", files_[file].path);
      bytes_[file] += piece;
      offset += piece;
      from += piece;
      bytes -= piece;
    }
  }
  const std::string& temp_path(size_t file) const override { return temps_[file]; }
  void add_bytes(size_t file, int64_t bytes) override { bytes_[file] += bytes; }

  int64_t bytes(size_t file) const {
    return files_[file].kind == OutputFile::Kind::Pixels ? 0 : bytes_[file].load();
  }

  // Collective: every byte reaches the storage, so that any rank may read it back.
  void sync(MPI_Comm comm, RankStatus& status) {
    for (size_t i = 0; i < files_.size(); ++i) {
      if (handles_[i] == MPI_FILE_NULL) continue;
      const int code = MPI_File_sync(handles_[i]);
      attempt(status, [&] { check_file(code, "cannot write", files_[i].path); });
    }
    MPI_CHECK(MPI_Barrier(comm));
  }

  // Collective.
  void close() {
    for (MPI_File& handle : handles_)
      if (handle != MPI_FILE_NULL) MPI_CHECK(MPI_File_close(&handle));
  }

 private:
  std::vector<OutputFile> files_;
  std::vector<std::string> temps_;
  std::vector<MPI_File> handles_;
  std::unique_ptr<std::atomic<int64_t>[]> bytes_;
  bool serialize_;  // MPI without MPI_THREAD_MULTIPLE: one MPI call at a time
  std::mutex mutex_;
};

namespace {

// One layout's files within the job's list: the layout numbers its files from 0.
class LayoutFiles : public FileWriter {
 public:
  LayoutFiles(FileWriter& all, size_t first) : all_(all), first_(first) {}
  void write_at(size_t file, int64_t offset, const void* data, int64_t bytes) override {
    all_.write_at(first_ + file, offset, data, bytes);
  }
  const std::string& temp_path(size_t file) const override { return all_.temp_path(first_ + file); }
  void add_bytes(size_t file, int64_t bytes) override { all_.add_bytes(first_ + file, bytes); }

 private:
  FileWriter& all_;
  size_t first_;
};

}  // namespace

OrderedOutputs::OrderedOutputs(MPI_Comm comm, std::string prefix, std::vector<OutputFormat> formats,
                               int64_t total_images, SinkOptions options, int64_t round_images)
    : comm_(comm), prefix_(std::move(prefix)), formats_(std::move(formats)), total_(total_images),
      options_(std::move(options)), round_images_(std::max<int64_t>(1, round_images)) {
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
    OutputOptions layout_options;
    layout_options.mosaic_tiles = options_.mosaic_tiles;
    if (rank_ == 0) layout_options.on_notice = options_.on_notice;
    for (OutputFormat format : formats_) {
      layouts_.emplace_back(format, prefix_, total_, layout_options);
      first_file_.push_back(all_files_.size());
      all_files_.insert(all_files_.end(), layouts_.back().files().begin(), layouts_.back().files().end());
    }
  });
}

void OrderedOutputs::create() {
  if (rank_ == 0) created_ = std::make_unique<OutputFiles>(all_files_);
}

void OrderedOutputs::open(RankStatus& status) {
  // Every rank learns the temporary names from rank 0.
  std::string joined;
  if (rank_ == 0) {
    for (size_t i = 0; i < all_files_.size(); ++i) joined += created_->temp_path(i) + '\n';
  }
  int64_t length = static_cast<int64_t>(joined.size());
  MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT64_T, 0, comm_));
  joined.resize(static_cast<size_t>(length));
  MPI_CHECK(MPI_Bcast(joined.data(), static_cast<int>(length), MPI_CHAR, 0, comm_));
  std::vector<std::string> temps;
  for (size_t start = 0; start < joined.size();) {
    const size_t end = joined.find('\n', start);
    temps.push_back(joined.substr(start, end - start));
    start = end + 1;
  }
  files_ = std::make_unique<MpiFiles>(all_files_, std::move(temps), !threaded_);
  files_->open(comm_, status);
  for (const OutputLayout& layout : layouts_)
    if (layout.format() == OutputFormat::Text) text_base_ = layout.text_data_offset();
  for (int b = 0; b < 2; ++b) {
    storage_.emplace_back(new float[static_cast<size_t>(round_images_) * kImageValues]);
    free_.push_back(storage_.back().get());
  }
  if (threaded_) writer_ = std::thread(&OrderedOutputs::writer_loop, this);
}

float* OrderedOutputs::next_buffer() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !free_.empty(); });
  float* buffer = free_.back();
  free_.pop_back();
  return buffer;
}

void OrderedOutputs::submit_round(float* buffer, ImageRange slice, const RankStatus& status) {
  const Round round{buffer, slice, status.failed};
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
  const bool skip = round.skip || status.failed;
  const int64_t count = skip ? 0 : round.slice.size();
  for (size_t l = 0; l < layouts_.size(); ++l) {
    const OutputLayout& layout = layouts_[l];
    LayoutFiles out(*files_, first_file_[l]);
    if (layout.format() != OutputFormat::Text) {
      attempt(status, [&] {
        parallel_for(count, options_.threads, [&](int64_t begin, int64_t end) {
          layout.write_run(round.buffer + begin * kImageValues, round.slice.begin + begin, end - begin, out);
        });
      });
      continue;
    }
    // Text: every rank takes part in the exchange of byte counts exactly once, whatever happens.
    bool placed = false;
    auto place = [&](int64_t bytes) {
      placed = true;
      int64_t before = 0;
      int64_t round_total = 0;
      MPI_Request requests[2];
      MPI_CHECK(MPI_Iexscan(&bytes, &before, 1, MPI_INT64_T, MPI_SUM, write_comm_, &requests[0]));
      MPI_CHECK(MPI_Iallreduce(&bytes, &round_total, 1, MPI_INT64_T, MPI_SUM, write_comm_, &requests[1]));
      wait_politely(&requests[0]);  // the ranks that finished their slice first wait here
      wait_politely(&requests[1]);
      if (rank_ == 0) before = 0;  // MPI_Exscan leaves rank 0's result undefined
      const int64_t at = text_base_ + before;
      text_base_ += round_total;
      return at;
    };
    const int64_t text_count = status.failed ? 0 : count;
    attempt(status, [&] { write_text_run(round.buffer, text_count, options_.threads, text_blocks_, place, out); });
    if (!placed) place(0);
  }
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
    // Mosaic PNGs: rank r encodes the mosaic files r, r + ranks, ... of the job.
    int64_t mosaic = 0;
    for (size_t l = 0; l < layouts_.size(); ++l) {
      if (layouts_[l].format() != OutputFormat::MosaicPng) continue;
      LayoutFiles out(*files_, first_file_[l]);
      for (size_t f = 0; f < layouts_[l].files().size(); f += 2, ++mosaic) {
        if (mosaic % ranks_ == rank_) attempt(status, [&] { layouts_[l].encode_png(f, out); });
      }
    }
    files_->sync(comm_, status);
    // Per-image PNGs were written by plain writes: each rank syncs its host's view of them.
    for (size_t i = 0; i < all_files_.size(); ++i) {
      if (all_files_[i].kind != OutputFile::Kind::Folder || rank_ == 0) continue;
      attempt(status, [&] {
        const int dir = ::open(files_->temp_path(i).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dir < 0 || ::syncfs(dir) != 0) {
          const int err = errno;
          if (dir >= 0) ::close(dir);
          throw UserError("writing " + all_files_[i].path + " failed: " + std::strerror(err));
        }
        ::close(dir);
      });
    }
    std::lock_guard<std::mutex> lock(mutex_);
    write_seconds_ += seconds_since(start);
  }
  files_->close();
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
    int64_t sum = 0;
    if (files_) {
      for (size_t f = 0; f < layouts_[l].files().size(); ++f) sum += files_->bytes(first_file_[l] + f);
    }
    if (rank_ == 0) {
      for (const OutputFile& file : layouts_[l].files()) sum += static_cast<int64_t>(file.header.size());
    }
    bytes.push_back(sum);
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
