// file_descriptor.hpp: a POSIX descriptor closed when its holder goes, and a write of a whole string
// through one, for the files the commit and the output engine open with open(2) themselves.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <string>

namespace facegen {

struct Descriptor {
  int fd = -1;  // -1: none
  ~Descriptor() {
    if (fd >= 0) ::close(fd);
  }
};

// Writes every byte of `text` at the descriptor's offset (EINTR retried); false with errno set where
// a write failed (a write of nothing leaves errno as the call left it).
inline bool write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace facegen
