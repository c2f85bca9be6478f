// fuzz_latents.cpp: libFuzzer target for the latent-file reader (files/latents.cpp).
//
// Input: byte 0 picks the read buffer (1..64 bytes, or the default 1 MiB), the rest is the file.
// The file goes into an in-memory file (memfd), so the reader sees a regular file with a size, as
// it does in real runs. It is read to the end in chunks of a few images, then finish().
// Acceptable outcomes: success, or a UserError. Anything else (another exception, a crash, a leak,
// undefined behaviour) is a finding. A second oracle: a run with a tiny buffer must agree with a run
// with the default buffer (same values, or the same message), except that a tiny buffer may refuse
// a token longer than itself.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "files/latents.hpp"
#include "generator/network.hpp"

namespace {

constexpr int64_t kImagesPerRead = 3;  // odd, so that chunks end mid-file

struct Outcome {
  bool ok = false;
  std::string error;
  std::vector<float> values;  // (images read, 100)
};

Outcome parse(const uint8_t* data, size_t size, size_t buffer_bytes) {
  Outcome outcome;
  const int fd = ::memfd_create("fuzz-latents", MFD_CLOEXEC);
  if (fd < 0) std::abort();
  size_t written = 0;
  while (written < size) {
    const ssize_t n = ::write(fd, data + written, size - written);
    if (n <= 0) std::abort();
    written += static_cast<size_t>(n);
  }
  if (::lseek(fd, 0, SEEK_SET) != 0) std::abort();
  std::FILE* file = ::fdopen(fd, "rb");
  if (file == nullptr) std::abort();
  try {
    facegen::LatentReader reader(file, "fuzz.txt", buffer_bytes);
    std::vector<float> chunk(kImagesPerRead * facegen::kLatentDim);
    while (reader.images_read() < reader.count()) {
      const int64_t got = reader.read(chunk.data(), kImagesPerRead);
      if (got <= 0) std::abort();  // read() must make progress until N images
      // Keep at most a few images: N may be large, memory must not grow with it.
      if (outcome.values.size() < 64 * facegen::kLatentDim) {
        outcome.values.insert(outcome.values.end(), chunk.begin(), chunk.begin() + got * facegen::kLatentDim);
      }
    }
    reader.finish();
    outcome.ok = true;
  } catch (const facegen::UserError& e) {
    outcome.error = e.what();
    if (outcome.error.empty()) std::abort();  // a user's error always says something
  }
  return outcome;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t buffer_bytes = data[0] < 0xC0 ? 1 + data[0] % 64 : facegen::LatentReader::kDefaultBufferBytes;
  const Outcome small = parse(data + 1, size - 1, buffer_bytes);
  if (buffer_bytes == facegen::LatentReader::kDefaultBufferBytes) return 0;
  const Outcome large = parse(data + 1, size - 1, facegen::LatentReader::kDefaultBufferBytes);
  if (small.ok) {
    if (!large.ok || !same_bits(small.values, large.values)) {
      std::fprintf(stderr, "buffer %zu accepted the file, the 1 MiB buffer %s\n", buffer_bytes,
                   large.ok ? "read other values" : large.error.c_str());
      std::abort();
    }
  } else if (small.error.find("is longer than") == std::string::npos && small.error != large.error) {
    std::fprintf(stderr, "buffer %zu: %s\n1 MiB buffer: %s\n", buffer_bytes, small.error.c_str(),
                 large.ok ? "accepted" : large.error.c_str());
    std::abort();
  }
  return 0;
}
