// direct_write.hpp: positioned writes past the page cache (O_DIRECT) for the large files an output
// writes in order (tar shards, npy, npy-u8), where the file system takes them: the bytes go from the
// caller's memory to the disk, without the kernel's copy into cached pages and their later writeback.
//
// A write of [offset, offset + bytes) is cut at the file's direct alignment A (statx's
// dio_offset_align, at least a page): the head, up to the first multiple of A, and the tail, after the
// last, go through the page cache (the file's ordinary descriptor); the whole blocks between through
// a descriptor opened with O_DIRECT, straight from the caller's memory where it is aligned to statx's
// dio_mem_align, else through an aligned buffer of the thread's own, kBounceBytes at a time. Every page
// of the file is so written one way only (the pieces of a file never overlap), and the bytes are those
// of plain writes: only the path differs.
//
// Which files: FACEGEN_DIRECT_WRITES=on|off|auto (unset: auto). auto takes O_DIRECT where
// direct_writes_pay() says it pays for that kind of file system; on takes it wherever the file
// system reports an alignment for it (statx STATX_DIOALIGN: block-device file systems, not tmpfs),
// for measurements (bench/bench_write.cpp, bench/job_profile.sh). A file system that refuses O_DIRECT
// (EINVAL) is written through the page cache, silently.
#pragma once

#include <cstdint>

namespace facegen {

constexpr int64_t kBounceBytes = int64_t{1} << 20;  // a writer thread's aligned buffer

// The three parts of a write of `bytes` at `offset`, cut at multiples of `alignment` (> 0): head and
// tail through the page cache (each < alignment), middle (a multiple of it) direct. Pure arithmetic.
struct DirectSplit {
  int64_t head = 0;
  int64_t middle = 0;
  int64_t tail = 0;
};
DirectSplit direct_split(int64_t offset, int64_t bytes, int64_t alignment);

// What O_DIRECT needs of a file: its offsets' and its memory's alignment; 0 where it takes no direct
// writes.
struct DirectAlignment {
  int64_t offset = 0;
  int64_t memory = 0;
  bool usable() const { return offset > 0; }
};

// The alignment the file system of the open file `fd` asks of direct writes (statx STATX_DIOALIGN,
// the offsets' at least a page), or none where it takes none.
DirectAlignment direct_alignment_of(int fd);
// The same where this run writes the file with O_DIRECT (FACEGEN_DIRECT_WRITES and
// the file system's kind), else none.
DirectAlignment direct_alignment_wanted(int fd);

// Whether O_DIRECT pays for the file system of statfs's f_type: the choice of FACEGEN_DIRECT_WRITES=auto.
bool direct_writes_pay(int64_t f_type);

// Opens `path` again for direct writes: the descriptor, or -1 where the file system refuses O_DIRECT.
int open_direct(const char* path);

// Writes `bytes` of `data` at `offset` of the file: the head and tail through `buffered_fd`, the whole
// blocks between through `direct_fd` (see above). *err is 0 or the failed call's errno (ENOSPC for a
// write that wrote nothing), as pwrite_fully's.
void pwrite_direct(int buffered_fd, int direct_fd, const DirectAlignment& alignment, int64_t offset, const void* data,
                   int64_t bytes, int* err);

}  // namespace facegen
