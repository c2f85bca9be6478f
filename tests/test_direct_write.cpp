// test_direct_write.cpp: writes past the page cache (engine/direct_write.hpp): the cut of a write at the
// direct alignment, and pieces of every size at every offset, from memory at every misalignment,
// giving the bytes of plain writes; on a file system that takes no O_DIRECT (tmpfs) the same calls
// are never made, and the case says so.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/direct_write.hpp"
#include "tests/test_support.hpp"

using namespace facegen;
using namespace facegen_test;

TEST_CASE("direct writes: a write is cut into a head and a tail under the alignment and whole blocks between") {
  std::mt19937_64 rng(7);
  for (int64_t alignment : {int64_t{512}, int64_t{4096}, int64_t{65536}}) {
    for (int k = 0; k < 20000; ++k) {
      const int64_t offset = k < 100 ? k * 37 : static_cast<int64_t>(rng() % (int64_t{1} << 36));
      const int64_t bytes = k % 7 == 0 ? static_cast<int64_t>(rng() % 3) : static_cast<int64_t>(rng() % (8 * alignment));
      CAPTURE(alignment);
      CAPTURE(offset);
      CAPTURE(bytes);
      const DirectSplit split = direct_split(offset, bytes, alignment);
      REQUIRE(split.head >= 0);
      REQUIRE(split.middle >= 0);
      REQUIRE(split.tail >= 0);
      CHECK(split.head + split.middle + split.tail == bytes);
      CHECK(split.middle % alignment == 0);
      CHECK(split.head < alignment);
      CHECK(split.tail < alignment);
      // The middle starts and ends on the alignment; the head reaches it unless the write ends first.
      if (split.middle > 0) CHECK((offset + split.head) % alignment == 0);
      if (split.middle > 0 || split.tail > 0) CHECK((offset + split.head) % alignment == 0);
      // Nothing direct is left out: the head and tail together hold no whole block.
      const int64_t first_block = (offset + alignment - 1) / alignment * alignment;
      const int64_t end_block = (offset + bytes) / alignment * alignment;
      CHECK(split.middle == std::max<int64_t>(0, end_block - first_block));
    }
  }
}

TEST_CASE("direct writes: pieces at every offset from memory at every misalignment give the plain writes' bytes") {
  TempDir dir;
  const std::string path = dir.file("direct.bin");
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  const DirectAlignment alignment = direct_alignment_of(fd);
  if (!alignment.usable()) {
    MESSAGE("the file system of " << dir.path << " takes no O_DIRECT: the direct writes are not tried here");
    ::close(fd);
    return;
  }
  const int direct_fd = open_direct(path.c_str());
  REQUIRE(direct_fd >= 0);
  // A file of 3 MiB + 1234 written as pieces of random sizes (some of many blocks, some under one) in
  // order, as a tar shard is, then a few rewritten in place out of order, as npy pieces may be; the
  // expected bytes beside it.
  std::mt19937_64 rng(11);
  const int64_t size = (int64_t{3} << 20) + 1234;
  std::vector<char> expected(static_cast<size_t>(size), 0);
  std::vector<char> source(static_cast<size_t>(size) + 8192);
  for (char& c : source) c = static_cast<char>(rng());
  void* memory = nullptr;
  REQUIRE(::posix_memalign(&memory, 4096, static_cast<size_t>(size) + 8192) == 0);
  char* aligned = static_cast<char*>(memory);
  int64_t offset = 0;
  int pieces = 0;
  while (offset < size) {
    const int64_t bytes = std::min(size - offset, static_cast<int64_t>(rng() % 3 == 0 ? rng() % 700 : rng() % 600000));
    const int64_t misalign = pieces % 4 == 0 ? 0 : static_cast<int64_t>(rng() % 4096);  // 0: aligned memory
    char* from = aligned + misalign;
    std::memcpy(from, source.data() + offset, static_cast<size_t>(bytes));
    int err = -1;
    pwrite_direct(fd, direct_fd, alignment, offset, from, bytes, &err);
    REQUIRE(err == 0);
    std::memcpy(expected.data() + offset, source.data() + offset, static_cast<size_t>(bytes));
    offset += bytes;
    ++pieces;
  }
  for (int k = 0; k < 20; ++k) {
    const int64_t at = static_cast<int64_t>(rng() % static_cast<uint64_t>(size));
    const int64_t bytes = std::min(size - at, static_cast<int64_t>(rng() % 100000));
    std::vector<char> fresh(static_cast<size_t>(bytes));
    for (char& c : fresh) c = static_cast<char>(rng());
    char* from = aligned + (k % 2 == 0 ? 0 : 1 + rng() % 511);
    std::memcpy(from, fresh.data(), fresh.size());
    int err = -1;
    pwrite_direct(fd, direct_fd, alignment, at, from, bytes, &err);
    REQUIRE(err == 0);
    std::memcpy(expected.data() + at, fresh.data(), fresh.size());
  }
  std::free(memory);
  ::close(direct_fd);
  REQUIRE(::fsync(fd) == 0);
  ::close(fd);
  const std::string got = read_file(path);
  REQUIRE(got.size() == expected.size());
  int64_t first_wrong = -1;
  for (size_t i = 0; i < got.size() && first_wrong < 0; ++i) {
    if (got[i] != expected[i]) first_wrong = static_cast<int64_t>(i);
  }
  CHECK_MESSAGE(first_wrong == -1, "byte " << first_wrong << " differs, of " << pieces << " pieces");
}
