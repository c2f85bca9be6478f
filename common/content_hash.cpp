// content_hash.cpp: XXH3-128 behind ContentHash (see content_hash.hpp).
#include "common/content_hash.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "common/errors.hpp"

namespace facegen {

struct ContentHash::State {
  XXH3_state_t* xxh = nullptr;  // XXH3_createState aligns it as XXH3 needs (64 bytes)
};

ContentHash::ContentHash() : state_(new State) {
  state_->xxh = XXH3_createState();
  if (state_->xxh == nullptr) throw std::bad_alloc();
  XXH3_128bits_reset(state_->xxh);
}

ContentHash::~ContentHash() { XXH3_freeState(state_->xxh); }

void ContentHash::add(const void* data, size_t bytes) {
  if (bytes > 0) XXH3_128bits_update(state_->xxh, data, bytes);
}

ContentDigest ContentHash::digest() const {
  const XXH128_hash_t h = XXH3_128bits_digest(state_->xxh);
  return {h.high64, h.low64};
}

std::string ContentDigest::hex() const {
  char text[33];
  std::snprintf(text, sizeof text, "%016llx%016llx", static_cast<unsigned long long>(high),
                static_cast<unsigned long long>(low));
  return text;
}

ContentDigest content_digest(const void* data, size_t bytes) {
  const XXH128_hash_t h = XXH3_128bits(data, bytes);
  return {h.high64, h.low64};
}

void ContentHash::add_file(int fd, int64_t bytes, const std::string& path) {
  constexpr int64_t kPiece = int64_t{1} << 20;
  std::vector<char> buffer(static_cast<size_t>(std::min(kPiece, std::max<int64_t>(bytes, 1))));
  for (int64_t offset = 0; offset < bytes;) {
    const ssize_t got = ::pread(fd, buffer.data(), static_cast<size_t>(std::min(kPiece, bytes - offset)), offset);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw UserError("reading " + path + " failed: " + std::strerror(errno));
    if (got == 0) throw UserError("reading " + path + " failed: it ends at byte " + std::to_string(offset) +
                                  ", before the " + std::to_string(bytes) + " bytes it had");
    add(buffer.data(), static_cast<size_t>(got));
    offset += got;
  }
}

ContentDigest file_digest(int fd, int64_t bytes, const std::string& path) {
  ContentHash hash;
  hash.add_file(fd, bytes, path);
  return hash.digest();
}

}  // namespace facegen
