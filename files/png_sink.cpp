// png_sink.cpp: PREFIX/ (a folder) with one PNG per image, 000000.png, 000001.png, ...: 64x64 8-bit RGB,
// each channel value v mapped by channel_to_byte, as in the mosaic.
//
// The folder appears complete or not at all: files go into PREFIX.tmp-XXXXXX beside it (mkdtemp), and
// commit() syncs the file system once (syncfs: one call instead of an fsync per file) and renames the
// folder into place. An older folder PREFIX is swapped out atomically (renameat2 RENAME_EXCHANGE) and
// removed only then; a sink destroyed before commit() removes its temporary folder.
//
// Each image is encoded by stb_image_write into memory and written with one write(2); images of a run
// are spread over threads, since zlib compression, not the disk, is the cost.
#include <fcntl.h>
#include <stb_image_write.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "files/image_sink.hpp"
#include "files/temp_registry.hpp"
#include "common/model_shape.hpp"
#include "common/threads.hpp"

namespace facegen {
namespace {

void append_to_string(void* context, void* data, int size) {
  static_cast<std::string*>(context)->append(static_cast<const char*>(data), static_cast<size_t>(size));
}

// Writes bytes to a new file at path, every call checked. Throws UserError (disk full, ...).
void write_whole_file(const std::string& path, const std::string& bytes) {
  int fd;
  {
    TempCreation creating;  // a signal's cleanup of the folder waits for the file to exist
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  }
  if (fd < 0) throw UserError("cannot create output file " + path + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      ::close(fd);
      throw UserError("writing " + path + " failed: " + std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) throw UserError("writing " + path + " failed: " + std::strerror(errno));
}

class PngFolderSink : public ImageSink {
 public:
  PngFolderSink(const std::string& folder, int64_t total_images, const SinkOptions& options)
      : folder_(folder), total_(total_images), threads_(resolve_threads(options.threads)) {
    struct stat st;
    if (::stat(folder_.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
      throw UserError("cannot create output folder " + folder_ + ": a file of that name exists");
    }
    std::string pattern = folder_ + ".tmp-XXXXXX";
    if (!create_registered_temp_folder(pattern, &listed_)) {  // a signal removes it with its files
      const int err = errno;
      throw UserError("cannot create output folder " + folder_ + ": " + std::strerror(err) +
                      (err == ENOENT ? " (does the directory exist?)" : ""));
    }
    temp_ = pattern;
    ::chmod(temp_.c_str(), 0755 & ~current_umask());
  }

  ~PngFolderSink() override {
    if (!temp_.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(temp_, ignored);
    }
    listed_.release();
  }

  void append(const float* images, int64_t first, int64_t count) override {
    if (first != written_ || count < 0 || count > total_ - written_) {
      throw std::logic_error("png sink " + folder_ + ": got images [" + std::to_string(first) + ", " +
                             std::to_string(first + count) + ") after " + std::to_string(written_) + " of " +
                             std::to_string(total_) + "; runs must be consecutive and in order");
    }
    std::atomic<int64_t> bytes{0};
    parallel_for(count, threads_, [&](int64_t begin, int64_t end) {
      std::vector<unsigned char> pixels(kImageValues);  // (64, 64, 3) RGB
      std::string png;
      for (int64_t i = begin; i < end; ++i) {
        const float* image = images + i * kImageValues;
        for (int k = 0; k < kImageValues; ++k) pixels[static_cast<size_t>(k)] = channel_to_byte(image[k]);
        png.clear();
        if (stbi_write_png_to_func(append_to_string, &png, kImageSize, kImageSize, 3, pixels.data(),
                                   kImageSize * 3) == 0) {
          throw std::runtime_error("stb_image_write could not encode a 64 x 64 PNG (out of memory?)");
        }
        write_whole_file(temp_ + "/" + png_file_name(first + i, total_), png);
        bytes += static_cast<int64_t>(png.size());
      }
    });
    bytes_ += bytes.load();
    written_ += count;
  }

  void commit() override {
    if (written_ != total_) {
      throw std::logic_error("png sink " + folder_ + ": commit after " + std::to_string(written_) + " of " +
                             std::to_string(total_) + " images");
    }
    const int dir = ::open(temp_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
      const int synced = ::syncfs(dir);
      const int err = errno;
      ::close(dir);
      if (synced != 0) throw UserError("writing " + folder_ + " failed: " + std::strerror(err));
    }
    struct stat st;
    if (::stat(folder_.c_str(), &st) == 0) {
      // An older folder: swap the two atomically, then remove the old one (now at the temporary name).
      if (::renameat2(AT_FDCWD, temp_.c_str(), AT_FDCWD, folder_.c_str(), RENAME_EXCHANGE) != 0) {
        throw UserError("replacing " + folder_ + " with " + temp_ + " failed: " + std::strerror(errno));
      }
    } else if (::rename(temp_.c_str(), folder_.c_str()) != 0) {
      throw UserError("renaming " + temp_ + " to " + folder_ + " failed: " + std::strerror(errno));
    } else {
      temp_.clear();
    }
    if (!temp_.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(temp_, ignored);
      temp_.clear();
    }
    listed_.release();
  }

  std::string path() const override { return folder_ + "/"; }
  int64_t bytes_written() const override { return bytes_; }

 private:
  static mode_t current_umask() {
    const mode_t mask = ::umask(022);
    ::umask(mask);
    return mask;
  }

  std::string folder_;
  std::string temp_;  // the temporary folder while it exists
  TempRegistration listed_;  // temp_ in the registry of temporary paths
  int64_t total_;
  int threads_;
  int64_t written_ = 0;
  int64_t bytes_ = 0;
};

}  // namespace

std::string png_file_name(int64_t index, int64_t total_images) {
  int digits = 6;
  for (int64_t limit = 1000000; limit < total_images; limit *= 10) ++digits;
  char name[40];
  std::snprintf(name, sizeof name, "%0*lld.png", digits, static_cast<long long>(index));
  return name;
}

std::unique_ptr<ImageSink> make_png_folder_sink(const std::string& folder, int64_t total_images,
                                                const SinkOptions& options) {
  return std::make_unique<PngFolderSink>(folder, total_images, options);
}

}  // namespace facegen
