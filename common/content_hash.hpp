// content_hash.hpp: the one hash of file contents in the program: XXH3 with 128 bits (Debian's
// libxxhash-dev, compiled in with XXH_INLINE_ALL, so nothing more is needed at run time).
//
// For telling files apart by their bytes where names, inodes and times say nothing: a node's own copy
// of the model or the latents against rank 0's (mpi/same_file.hpp), a finished output against what a
// manifest recorded. It tells accidents apart (a truncated, stale or different copy), not a forgery
// made on purpose: it is not a cryptographic hash. About 10 GB/s on one core from memory; reading
// the file is the cost.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace facegen {

struct ContentDigest {
  uint64_t high = 0;
  uint64_t low = 0;
  bool operator==(const ContentDigest& other) const { return high == other.high && low == other.low; }
  bool operator!=(const ContentDigest& other) const { return !(*this == other); }
  std::string hex() const;  // 32 lowercase hex digits, high half first (XXH128's canonical order)
};

// Bytes added in any number of pieces give the digest of their concatenation.
class ContentHash {
 public:
  ContentHash();
  ~ContentHash();
  ContentHash(const ContentHash&) = delete;
  ContentHash& operator=(const ContentHash&) = delete;

  void add(const void* data, size_t bytes);
  // The first `bytes` bytes of the open file `fd` (pread, 1 MiB at a time; the file's offset is not
  // used). Throws UserError naming `path` when a read fails or the file ends sooner.
  void add_file(int fd, int64_t bytes, const std::string& path);
  ContentDigest digest() const;  // of everything added so far; more may be added after

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The digest of `bytes` bytes at once.
ContentDigest content_digest(const void* data, size_t bytes);

// The digest of the first `bytes` bytes of the open file `fd` (ContentHash::add_file alone).
ContentDigest file_digest(int fd, int64_t bytes, const std::string& path);

}  // namespace facegen
