// fuzz_latents.cpp: libFuzzer target for the latent-file reader (latents/latents.cpp) and for reading
// by ranges (latents/text_latents.cpp, latents/latent_index.cpp).
//
// Input: byte 0 picks the read buffer (1..64 bytes, or the default 1 MiB), the rest is the file.
// The file goes into an in-memory file (memfd), so the reader sees a regular file with a size, as
// it does in real runs. It is read to the end in chunks of a few images, then finish().
// Acceptable outcomes: success, or a UserError. Anything else (another exception, a crash, a leak,
// undefined behaviour) is a finding. A second oracle: a run with a tiny buffer must agree with a run
// with the default buffer (same values, or the same message), except that a tiny buffer may refuse
// a token longer than itself. A third: reading by ranges, as threads and ranks do (the token map
// counted in 1 to 3 parts, 1 to 4 threads, slices of 1 to 4 images, picked by byte 0), must agree
// with the default buffer too.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "latents/latent_index.hpp"
#include "latents/latents.hpp"
#include "latents/text_latents.hpp"
#include "generator/network.hpp"

namespace {

constexpr int64_t kImagesPerRead = 3;  // odd, so that chunks end mid-file

struct Outcome {
  bool ok = false;
  std::string error;
  std::vector<float> values;  // (images read, 100)
};

// The file in memory (a memfd), and a path that names it for the readers that open files themselves.
struct MemoryFile {
  int fd = -1;
  std::string path;
  MemoryFile(const uint8_t* data, size_t size) {
    fd = ::memfd_create("fuzz-latents", MFD_CLOEXEC);
    if (fd < 0) std::abort();
    size_t written = 0;
    while (written < size) {
      const ssize_t n = ::write(fd, data + written, size - written);
      if (n <= 0) std::abort();
      written += static_cast<size_t>(n);
    }
    path = "/proc/self/fd/" + std::to_string(fd);
  }
  ~MemoryFile() { ::close(fd); }
};

Outcome parse(const MemoryFile& memory, size_t buffer_bytes) {
  Outcome outcome;
  const int fd = ::dup(memory.fd);
  if (fd < 0 || ::lseek(fd, 0, SEEK_SET) != 0) std::abort();
  std::FILE* file = ::fdopen(fd, "rb");
  if (file == nullptr) std::abort();
  try {
    facegen::LatentReader reader(file, memory.path, buffer_bytes);
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

// Reading by ranges: `parts` sources count their parts of the map and install the sum; then slices
// of `slice` images go to the sources in turn, each read with `threads` threads, in file order.
Outcome parse_ranges(const MemoryFile& memory, int parts, int threads, int64_t slice) {
  Outcome outcome;
  try {
    std::vector<std::unique_ptr<facegen::LatentSource>> sources;
    for (int p = 0; p < parts; ++p) sources.push_back(facegen::open_text_latents(memory.path));
    std::vector<int64_t> sum(static_cast<size_t>(facegen::LatentIndex::kBlocks) * facegen::LatentIndex::kFields, 0);
    for (int p = 0; p < parts; ++p) {
      sources[static_cast<size_t>(p)]->set_threads(threads);
      const std::vector<int64_t> part = sources[static_cast<size_t>(p)]->map_part(p, parts);
      if (part.size() != sum.size()) std::abort();
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
    }
    for (auto& source : sources) source->set_map(sum);
    const int64_t count = sources[0]->count();
    std::vector<float> chunk(static_cast<size_t>(slice) * facegen::kLatentDim);
    for (int64_t first = 0, turn = 0; first < count; first += slice, ++turn) {
      const int64_t n = std::min(slice, count - first);
      sources[static_cast<size_t>(turn % parts)]->read_range(first, n, chunk.data());
      if (outcome.values.size() < 64 * facegen::kLatentDim) {
        outcome.values.insert(outcome.values.end(), chunk.begin(), chunk.begin() + n * facegen::kLatentDim);
      }
    }
    sources[static_cast<size_t>(count % parts)]->finish();
    outcome.ok = true;
  } catch (const facegen::UserError& e) {
    outcome.values.clear();
    outcome.error = e.what();
    if (outcome.error.empty()) std::abort();
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
  const MemoryFile memory(data + 1, size - 1);
  const Outcome large = parse(memory, facegen::LatentReader::kDefaultBufferBytes);
  const Outcome ranges = parse_ranges(memory, 1 + data[0] % 3, 1 + (data[0] >> 2) % 4, 1 + (data[0] >> 4) % 4);
  if (ranges.ok != large.ok || ranges.error != large.error || (large.ok && !same_bits(ranges.values, large.values))) {
    std::fprintf(stderr, "by ranges: %s\n1 MiB buffer: %s\n", ranges.ok ? "accepted" : ranges.error.c_str(),
                 large.ok ? "accepted" : large.error.c_str());
    std::abort();
  }
  if (buffer_bytes == facegen::LatentReader::kDefaultBufferBytes) return 0;
  const Outcome small = parse(memory, buffer_bytes);
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
