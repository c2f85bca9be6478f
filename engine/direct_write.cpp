// direct_write.cpp: writes past the page cache where the file system takes them (see direct_write.hpp).
#include "engine/direct_write.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "engine/pwrite_fully.hpp"

namespace facegen {
namespace {

// Whether auto takes O_DIRECT on local disks' file systems (ext4, xfs). Measured on a 2-vCPU VM's ext4
// (virtio disk, 2026-11-29): 40,000 synthetic images to tar, npy-u8 and npy shards (2.9 GB) took 30-40 s
// and 4.8-6.2 s of system time through the page cache, 13-16 s and 0.5-0.6 s with O_DIRECT, the same
// bytes; bench/job_profile.sh measures the GPU machine's root disk both ways.
constexpr bool kDirectWritesPayOnDisks = true;

enum class DirectMode { Auto, On, Off };

DirectMode direct_mode() {
  static const DirectMode mode = [] {
    const char* text = std::getenv("FACEGEN_DIRECT_WRITES");
    const std::string value = text != nullptr ? text : "";
    return value == "on" ? DirectMode::On : value == "off" ? DirectMode::Off : DirectMode::Auto;
  }();
  return mode;
}

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

// This thread's aligned buffer for blocks whose memory O_DIRECT cannot take as it is.
char* bounce_buffer() {
  thread_local std::unique_ptr<char, FreeDeleter> buffer;
  if (!buffer) {
    void* memory = nullptr;
    if (::posix_memalign(&memory, 4096, static_cast<size_t>(kBounceBytes)) != 0) throw std::bad_alloc();
    buffer.reset(static_cast<char*>(memory));
  }
  return buffer.get();
}

bool aligned(const void* p, int64_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(alignment) == 0;
}

// Whole aligned blocks from aligned memory through `direct_fd`; what O_DIRECT refuses (EINVAL: a limit
// such as ulimit -f cut a block short) and what a short write leaves unaligned go through the page cache.
void direct_fully(int buffered_fd, int direct_fd, const DirectAlignment& alignment, int64_t offset, const char* from,
                  int64_t bytes, int* err) {
  constexpr int64_t kMaxCall = int64_t{1} << 30;
  while (bytes > 0) {
    if (offset % alignment.offset != 0 || bytes % alignment.offset != 0 || !aligned(from, alignment.memory)) break;
    const ssize_t n = ::pwrite(direct_fd, from, static_cast<size_t>(std::min(bytes, kMaxCall)), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EINVAL) break;
    if (n <= 0) {
      *err = n < 0 ? errno : ENOSPC;
      return;
    }
    from += n;
    offset += n;
    bytes -= n;
  }
  pwrite_fully(buffered_fd, offset, from, bytes, err);
}

}  // namespace

DirectSplit direct_split(int64_t offset, int64_t bytes, int64_t alignment) {
  DirectSplit split;
  const int64_t into_block = offset % alignment;
  split.head = std::min(bytes, into_block == 0 ? 0 : alignment - into_block);
  split.middle = (bytes - split.head) / alignment * alignment;
  split.tail = bytes - split.head - split.middle;
  return split;
}

bool direct_writes_pay(int64_t f_type) {
  switch (static_cast<unsigned long>(f_type)) {
    case 0xEF53:      // ext2, ext3, ext4
    case 0x58465342:  // xfs
      return kDirectWritesPayOnDisks;
    default: return false;  // tmpfs (no disk), served file systems (NFS, Lustre: their own caching), btrfs, ...
  }
}

DirectAlignment direct_alignment_of(int fd) {
  struct statx st;
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &st) != 0 || !(st.stx_mask & STATX_DIOALIGN) ||
      st.stx_dio_offset_align == 0 || st.stx_dio_mem_align == 0) {
    return {};  // the file system takes no direct writes (tmpfs) or does not say how
  }
  const int64_t page = ::sysconf(_SC_PAGESIZE);
  return {std::max<int64_t>(st.stx_dio_offset_align, page), st.stx_dio_mem_align};
}

DirectAlignment direct_alignment_wanted(int fd) {
  const DirectMode mode = direct_mode();
  if (mode == DirectMode::Off) return {};
  if (mode == DirectMode::Auto) {
    struct statfs fs;
    if (::fstatfs(fd, &fs) != 0 || !direct_writes_pay(static_cast<int64_t>(fs.f_type))) return {};
  }
  return direct_alignment_of(fd);
}

int open_direct(const char* path) { return ::open(path, O_WRONLY | O_DIRECT | O_CLOEXEC); }

void pwrite_direct(int buffered_fd, int direct_fd, const DirectAlignment& alignment, int64_t offset, const void* data,
                   int64_t bytes, int* err) {
  const char* from = static_cast<const char*>(data);
  const DirectSplit split = direct_split(offset, bytes, alignment.offset);
  *err = 0;
  if (split.head > 0) pwrite_fully(buffered_fd, offset, from, split.head, err);
  if (*err != 0) return;
  const char* middle = from + split.head;
  const int64_t at = offset + split.head;
  if (aligned(middle, alignment.memory)) {
    direct_fully(buffered_fd, direct_fd, alignment, at, middle, split.middle, err);
  } else {
    char* bounce = bounce_buffer();
    for (int64_t done = 0; done < split.middle && *err == 0; done += kBounceBytes) {
      const int64_t piece = std::min(kBounceBytes, split.middle - done);
      std::memcpy(bounce, middle + done, static_cast<size_t>(piece));
      direct_fully(buffered_fd, direct_fd, alignment, at + done, bounce, piece, err);
    }
  }
  if (*err != 0 || split.tail == 0) return;
  pwrite_fully(buffered_fd, at + split.middle, middle + split.middle, split.tail, err);
}

}  // namespace facegen
