// input_file.cpp: reading exactly the bytes asked for at an offset (see input_file.hpp).
#include "files/input_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/errors.hpp"

namespace facegen {

InputFile::InputFile(const std::string& path) : path_(path), fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
  if (fd_ < 0) {
    const int err = errno;
    throw UserError("cannot open input file " + path + ": " + std::strerror(err));
  }
}

InputFile::~InputFile() { ::close(fd_); }

void InputFile::read_at(int64_t offset, int64_t bytes, char* dst) const {
  while (bytes > 0) {
    const ssize_t got = ::pread(fd_, dst, static_cast<size_t>(bytes), static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      const int err = errno;
      throw UserError("reading input file " + path_ + " failed: " +
                      (got == 0 ? std::string("it became shorter while it was read") : std::strerror(err)));
    }
    dst += got;
    offset += got;
    bytes -= got;
  }
}

}  // namespace facegen
