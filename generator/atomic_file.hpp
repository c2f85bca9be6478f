// atomic_file.hpp: an output file that appears complete or not at all.
//
// Writes go to a temporary file beside the final path (same directory, so rename is atomic);
// commit() flushes, fsyncs and renames it over the final path. If the object is destroyed before
// commit() (an error, an exception), the temporary file is removed and an existing file of the final
// name is left untouched. Every failure (directory missing or not writable, disk full) is a UserError
// naming the path and the system's reason.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>

namespace facegen {

class AtomicFile {
 public:
  explicit AtomicFile(std::string final_path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  void commit();
  void abandon();  // remove the temporary file now

  const std::string& final_path() const { return final_path_; }
  const std::string& temp_path() const { return temp_path_; }
  bool committed() const { return committed_; }

 private:
  std::string final_path_;
  std::string temp_path_;
  std::FILE* file_ = nullptr;
  bool committed_ = false;
};

}  // namespace facegen
