// pwrite_fully.cpp: pwrite until every byte is written (see pwrite_fully.hpp).
#include "engine/pwrite_fully.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace facegen {

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
