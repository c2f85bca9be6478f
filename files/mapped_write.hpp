// mapped_write.hpp: a positioned write into a file through a shared mapping of its range, for many
// threads or processes writing disjoint ranges of ONE file.
//
// Linux takes a file's inode lock for every buffered write(2)/pwrite(2), so writers of one file go
// one at a time however many there are (one H200 machine, 8 GiB into one file on pre-faulted
// /dev/shm: pwrite 2.7-3.2 GB/s from 1, 4 or 16 threads; docs/benchmarks/history.md, "One file"). Page faults on a
// MAP_SHARED mapping take no such lock. mapped_write() reserves the range's space with fallocate
// first, so that a full file system or `ulimit -f` is an ordinary failed call (ENOSPC, EFBIG) and
// never a SIGBUS on a store into the mapping; then it maps the range window by window (4 MiB),
// populates, copies and unmaps each (a thread holds at most one window resident, and no mapping
// outlives the call). The data reaches the
// storage with the file's next fsync, as after pwrite.
//
// Which way is faster depends on the machine: on one H200 machine, 16 threads wrote one file on
// /dev/shm at 6.0 GB/s through one mapping of the whole file against 2.7 GB/s with pwrite (16
// processes 8.0 against 3.2), but one thread at 1.5 against 3.2 GB/s; on a 2-core VM whose page
// faults are dear, these windows ran 5-9 times slower than pwrite. So a writer measures both on
// its own runs (WriteWayTrial) and keeps the faster.
//
// A SIGBUS can still come from outside (another process truncating the file, an I/O error): it is
// the crash of stop_signals.hpp, which removes the run's temporary files before the process dies.
#pragma once

#include <algorithm>
#include <cstdint>

namespace facegen {

// Writes smaller than this go through pwrite: mapping a range costs more than waiting for the lock.
// (npy runs are cut into pieces of count / (8 x threads) images: 8 images, 393 KB, for a chunk of
// 1024 on 16 threads; BMP rows are at most 24 KB.)
constexpr int64_t kMappedWriteMinBytes = int64_t{256} << 10;

// The most a call maps at once.
constexpr int64_t kMappedWindowBytes = int64_t{4} << 20;

enum class MappedWrite { Done, Unsupported, Failed };

// Writes `bytes` bytes of `data` at `offset` of `fd` (opened O_RDWR) through a mapping. Unsupported:
// the file system can neither reserve space (fallocate) nor map the file, nothing was written, and
// the caller writes with pwrite instead; Failed: *err holds the failed call's errno (ENOSPC, EFBIG).
// A window that cannot be mapped for want of address space (ENOMEM, as under `ulimit -v`) is written
// with pwrite instead: the mapping is a way to write faster, not a reason to fail.
MappedWrite mapped_write(int fd, int64_t offset, const void* data, int64_t bytes, int* err);

// Writes `bytes` bytes of `data` at `offset` of `fd` with pwrite (1 GiB a call, EINTR retried);
// *err is 0 or the failed call's errno (ENOSPC for a write that wrote nothing).
void pwrite_fully(int fd, int64_t offset, const void* data, int64_t bytes, int* err);

// The choice between pwrite and mapped writes for a writer that writes runs one after another, each
// with all its threads (a sink's chunk, a rank's round): its first four runs of at least kTrialBytes
// go through pwrite, mappings, pwrite, mappings, and the way of the higher best rate (bytes over the
// run's seconds) writes every later run. Two runs each, so that one run slowed by a busy machine or
// by being first does not decide. Not thread-safe: called by the one thread that hands out runs.
//
// For tests only, FACEGEN_TEST_WRITE_WAY=mapped (or =pwrite) fixes the way from the first run on.
class WriteWayTrial {
 public:
  static constexpr int64_t kTrialBytes = int64_t{8} << 20;  // shorter runs are timed too coarsely
  static constexpr int kTrials = 4;
  WriteWayTrial();
  bool mapped_now() const {
    if (fixed_ != 0) return fixed_ > 0;
    return trials_ < kTrials ? trials_ % 2 == 1 : best_rate_[1] > best_rate_[0];
  }
  void ran(int64_t bytes, double seconds) {
    if (fixed_ != 0 || trials_ >= kTrials || bytes < kTrialBytes || seconds <= 0) return;
    double& best = best_rate_[trials_ % 2];
    best = std::max(best, static_cast<double>(bytes) / seconds);
    ++trials_;
  }
  bool decided() const { return fixed_ != 0 || trials_ == kTrials; }

 private:
  int fixed_ = 0;  // the test hook: 1 mapped, -1 pwrite, 0 measure
  int trials_ = 0;
  double best_rate_[2] = {0, 0};  // pwrite, mapped
};

}  // namespace facegen
