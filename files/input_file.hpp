// input_file.hpp: an input file opened for reading at any offset, by several threads at once.
//
// The latent readers that read by ranges (the text file's token map, .npy latents) read exactly the
// bytes they ask for at a given offset with pread, so threads share one descriptor. Every failure is
// a UserError naming the file: it cannot be opened, a read fails, or it became shorter.
#pragma once

#include <cstdint>
#include <string>

namespace facegen {

class InputFile {
 public:
  explicit InputFile(const std::string& path);  // throws UserError ("cannot open input file ...")
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // Exactly `bytes` bytes at `offset` into dst (the file must not have shrunk since its size was taken).
  void read_at(int64_t offset, int64_t bytes, char* dst) const;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_;
};

}  // namespace facegen
