// test_content_hash.cpp: the program's one content hash (common/content_hash.hpp).
//
// Known answers come from xxhsum -H2 (Debian's xxhash 0.8.1, XXH128), a separate program: the empty
// input, "abc", and 1,048,579 bytes of 'a' (a megabyte and three, past file_digest's 1 MiB piece).
// Bytes added in pieces of random sizes give the digest of the whole; one byte changed anywhere
// changes it; file_digest of a file equals the digest of its bytes, and a file shorter than asked
// is a UserError naming it.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <random>
#include <string>
#include <vector>

#include "common/content_hash.hpp"
#include "common/errors.hpp"
#include "test_support.hpp"

using namespace facegen;
using namespace facegen_test;

TEST_CASE("content hash: known answers of XXH128 (xxhsum -H2)") {
  CHECK(content_digest("", 0).hex() == "99aa06d3014798d86001c324468d497f");
  CHECK(content_digest("abc", 3).hex() == "06b05ab6733a618578af5f94892f3950");
  const std::string many(1048579, 'a');
  CHECK(content_digest(many.data(), many.size()).hex() == "229bc8ba64efba5e9167caf7336a692a");
  ContentHash empty;
  CHECK(empty.digest().hex() == "99aa06d3014798d86001c324468d497f");
}

TEST_CASE("content hash: pieces of any size give the digest of the whole; one changed byte changes it") {
  std::mt19937_64 random(20261127);
  std::vector<unsigned char> bytes(3 * 1048576 + 127);
  for (auto& b : bytes) b = static_cast<unsigned char>(random());
  const ContentDigest whole = content_digest(bytes.data(), bytes.size());
  for (int trial = 0; trial < 5; ++trial) {
    ContentHash hash;
    size_t at = 0;
    while (at < bytes.size()) {
      const size_t piece = std::min(bytes.size() - at, static_cast<size_t>(random() % (trial == 0 ? 3 : 300000)));
      hash.add(bytes.data() + at, piece);
      at += piece;
    }
    CHECK(hash.digest() == whole);
  }
  for (size_t at : {size_t{0}, size_t{1}, bytes.size() / 2, bytes.size() - 1}) {
    bytes[at] ^= 1;
    CHECK(content_digest(bytes.data(), bytes.size()) != whole);
    bytes[at] ^= 1;
  }
  CHECK(content_digest(bytes.data(), bytes.size() - 1) != whole);
}

TEST_CASE("content hash: file_digest reads the file's first bytes; a short file is named") {
  TempDir dir;
  const std::string path = dir.file("f.bin");
  std::mt19937_64 random(7);
  std::vector<char> bytes(1048576 * 2 + 3);
  for (auto& b : bytes) b = static_cast<char>(random());
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  CHECK(file_digest(fd, static_cast<int64_t>(bytes.size()), path) == content_digest(bytes.data(), bytes.size()));
  CHECK(file_digest(fd, 1048577, path) == content_digest(bytes.data(), 1048577));
  CHECK(file_digest(fd, 0, path) == content_digest("", 0));
  try {
    file_digest(fd, static_cast<int64_t>(bytes.size()) + 1, path);
    FAIL("a file shorter than asked was hashed");
  } catch (const UserError& e) {
    CHECK(std::string(e.what()).find(path) != std::string::npos);
  }
  ::close(fd);
}
