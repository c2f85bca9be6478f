// mapped_write.cpp: positioned writes through a shared mapping of the range (see mapped_write.hpp).
#include "files/mapped_write.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older headers lack the name
#endif

namespace facegen {
namespace {

bool means_unsupported(int err) { return err == EOPNOTSUPP || err == ENOSYS || err == ENODEV; }

}  // namespace

WriteWayTrial::WriteWayTrial() {
  const char* way = std::getenv("FACEGEN_TEST_WRITE_WAY");
  if (way != nullptr && std::strcmp(way, "mapped") == 0) fixed_ = 1;
  if (way != nullptr && std::strcmp(way, "pwrite") == 0) fixed_ = -1;
}

MappedWrite mapped_write(int fd, int64_t offset, const void* data, int64_t bytes, int* err) {
  *err = 0;
  if (bytes <= 0) return MappedWrite::Done;
  int reserved;
  do {
    reserved = ::fallocate(fd, 0, offset, bytes);
  } while (reserved != 0 && errno == EINTR);
  if (reserved != 0) {
    *err = errno;
    return means_unsupported(*err) ? MappedWrite::Unsupported : MappedWrite::Failed;
  }
  // Window by window, so that a process maps (and holds resident) at most kMappedWindowBytes per thread.
  static const int64_t page = ::sysconf(_SC_PAGESIZE);
  const char* from = static_cast<const char*>(data);
  for (int64_t done = 0; done < bytes;) {
    const int64_t at = offset + done;
    const int64_t start = at / page * page;
    const int64_t piece = std::min(bytes - done, kMappedWindowBytes - (at - start));
    const size_t length = static_cast<size_t>(at + piece - start);
    void* mapping = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, start);
    if (mapping == MAP_FAILED && errno == ENOMEM) {
      pwrite_fully(fd, at, from + done, bytes - done, err);
      return *err == 0 ? MappedWrite::Done : MappedWrite::Failed;
    }
    if (mapping == MAP_FAILED) {
      *err = errno;
      // Only the first window may find mapping unsupported: nothing is written yet.
      return done == 0 && means_unsupported(*err) ? MappedWrite::Unsupported : MappedWrite::Failed;
    }
    // Populating the window in one call costs far less than a fault per page where faults are dear
    // (a 2-core VM took 40 us a fault: 90 MB/s); kernels before 5.14 say EINVAL and fault page by page.
    if (::madvise(mapping, length, MADV_POPULATE_WRITE) != 0 && errno != EINVAL) {
      *err = errno;
      ::munmap(mapping, length);
      return MappedWrite::Failed;
    }
    std::memcpy(static_cast<char*>(mapping) + (at - start), from + done, static_cast<size_t>(piece));
    if (::munmap(mapping, length) != 0) {
      *err = errno;
      return MappedWrite::Failed;
    }
    done += piece;
  }
  return MappedWrite::Done;
}

void pwrite_fully(int fd, int64_t offset, const void* data, int64_t bytes, int* err) {
  constexpr int64_t kMaxPwriteBytes = int64_t{1} << 30;  // Linux writes at most 2 GiB - 4 KB a call
  const char* from = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, from, static_cast<size_t>(std::min(bytes, kMaxPwriteBytes)), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *err = n < 0 ? errno : ENOSPC;
      return;
    }
    from += n;
    offset += n;
    bytes -= n;
  }
  *err = 0;
}

}  // namespace facegen
