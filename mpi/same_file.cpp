// same_file.cpp: gathering every rank's file identity, and comparing contents where it differs
// (see same_file.hpp).
#include "mpi/same_file.hpp"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include "common/content_hash.hpp"
#include "common/errors.hpp"
#include "common/text_format.hpp"
#include "latents/file_system_kind.hpp"
#include "mpi/mpi_check.hpp"
#include "mpi/polite_wait.hpp"

namespace facegen {
namespace mpi {
namespace {

// One rank's file as it travels (MPI_BYTE: the ranks of a job share one build).
struct OpenedFile {
  FileIdentity id;
  int32_t opened;  // 0: no file on this rank
  int32_t node;    // RankTopology::node_index
  char host[64];
  char kernel[40];  // /proc/sys/kernel/random/boot_id: ranks that share a kernel share its files' numbers
};

// One rank's digest as it travels; `hashed` 0 where the rank hashed nothing (or its read failed).
struct HashedFile {
  uint64_t high;
  uint64_t low;
  int32_t hashed;
  int32_t unused;
};

// "2026-11-23 10:00:01.123456789", local time.
std::string time_text(int64_t ns) {
  const std::time_t seconds = static_cast<std::time_t>(ns / 1000000000);
  std::tm parts{};
  ::localtime_r(&seconds, &parts);
  char text[64];
  const size_t length = std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &parts);
  std::snprintf(text + length, sizeof text - length, ".%09lld", static_cast<long long>(ns % 1000000000));
  return text;
}

// This kernel's boot id; the host name where it cannot be read (then a host is one kernel).
std::string kernel_id(const std::string& host) {
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(boot, id);
  return id.empty() ? "host " + host : id;
}

bool same_identity(const FileIdentity& a, const FileIdentity& b) {
  return a.device == b.device && a.inode == b.inode && a.bytes == b.bytes && a.modified_ns == b.modified_ns;
}

// Whether rank r opened rank 0's very file (whatever its size and time now): under one kernel the
// same device and inode; across kernels the same inode of a served file system (its clients see the
// server's numbers; their st_dev differs), never of two nodes' own disks.
bool opened_rank0_file(const std::vector<OpenedFile>& all, size_t r) {
  const OpenedFile& mine = all[r];
  const OpenedFile& root = all[0];
  if (mine.id.inode != root.id.inode) return false;
  if (std::strncmp(mine.kernel, root.kernel, sizeof mine.kernel) == 0) return mine.id.device == root.id.device;
  return !node_local_file_system(mine.id.fs_type) && !node_local_file_system(root.id.fs_type);
}

// How rank 0's very file changed between its open and rank r's (as "sees X, rank 0 Y"), or "".
std::string change_between_opens(const FileIdentity& mine, const FileIdentity& root) {
  if (mine.bytes != root.bytes) return "sees " + with_commas(mine.bytes) + " bytes, rank 0 " + with_commas(root.bytes);
  if (mine.modified_ns != root.modified_ns) {
    return "sees it modified at " + time_text(mine.modified_ns) + ", rank 0 at " + time_text(root.modified_ns);
  }
  return "";
}

// The ranks whose file is compared by its contents: opened, not rank 0, another file than rank 0's.
std::vector<bool> compared_by_contents(const std::vector<OpenedFile>& all) {
  std::vector<bool> compared(all.size(), false);
  if (!all[0].opened) return compared;
  for (size_t r = 1; r < all.size(); ++r) compared[r] = all[r].opened && !opened_rank0_file(all, r);
  return compared;
}

// The rank that hashes rank r's file: the lowest rank of r's node that opened the same file.
size_t hasher_of(const std::vector<OpenedFile>& all, size_t r) {
  for (size_t q = 0; q < r; ++q) {
    if (all[q].opened && all[q].node == all[r].node && same_identity(all[q].id, all[r].id)) return q;
  }
  return r;
}

std::string short_hex(const HashedFile& h) {
  const std::string hex = ContentDigest{h.high, h.low}.hex();
  return hex.substr(0, 4) + "..." + hex.substr(hex.size() - 4);
}

}  // namespace

void require_same_file(MPI_Comm world, const RankTopology& topo, const InputFile* file, RankStatus* status) {
  OpenedFile mine{};
  mine.opened = file != nullptr && file->regular() ? 1 : 0;
  if (mine.opened) mine.id = file->identity();
  mine.node = topo.node_index;
  std::snprintf(mine.host, sizeof mine.host, "%s", topo.host.c_str());
  std::snprintf(mine.kernel, sizeof mine.kernel, "%s", kernel_id(topo.host).c_str());
  std::vector<OpenedFile> all(static_cast<size_t>(topo.world_size));
  MPI_Request request;
  MPI_CHECK(MPI_Iallgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, world, &request));
  wait_politely(&request);  // a rank may still be opening, or reading its model
  // Every rank knows from `all` alone who is compared and who hashes, so all take the same path.
  const std::vector<bool> compared = compared_by_contents(all);
  const size_t me = static_cast<size_t>(topo.world_rank);
  const std::string there = "rank 0's (host " + std::string(all[0].host) + ")";
  const std::string opened_here = file != nullptr ? "the " + file->what() + " opened here is not " + there : "";
  // Rank 0's very file, changed in place between the two opens.
  if (me != 0 && mine.opened && all[0].opened && !compared[me]) {
    const std::string how = change_between_opens(mine.id, all[0].id);
    if (!how.empty()) {
      status->fail(kExitInput, "the " + file->what() + " changed between ranks' opens: rank " + std::to_string(me) +
                                   " on host " + topo.host + " " + how);
    }
  }
  // A size that differs needs no hash.
  if (compared[me] && mine.id.bytes != all[0].id.bytes) {
    status->fail(kExitInput, opened_here + ": " + with_commas(mine.id.bytes) + " bytes here, " +
                                 with_commas(all[0].id.bytes) + " there");
  }
  bool any_hash = false;
  std::vector<bool> hashes(all.size(), false);  // who hashes: rank 0 and the first rank of each other copy
  for (size_t r = 1; r < all.size(); ++r) {
    if (!compared[r] || all[r].id.bytes != all[0].id.bytes) continue;
    hashes[hasher_of(all, r)] = true;
    any_hash = true;
  }
  if (!any_hash) return;
  hashes[0] = true;
  HashedFile digest{};
  if (hashes[me]) {
    RankStatus reading;
    attempt(reading, [&] {
      const ContentDigest d = file->digest();
      digest = {d.high, d.low, 1, 0};
    });
    if (reading.failed) status->fail(reading.exit_code, reading.message);
  }
  std::vector<HashedFile> digests(all.size());
  MPI_CHECK(MPI_Iallgather(&digest, sizeof digest, MPI_BYTE, digests.data(), sizeof digest, MPI_BYTE, world, &request));
  wait_politely(&request);  // the hashing ranks read their whole file
  if (!compared[me] || mine.id.bytes != all[0].id.bytes) return;
  const HashedFile& root = digests[0];
  const HashedFile& here = digests[hasher_of(all, me)];
  if (!root.hashed || !here.hashed) return;  // a failed read: that rank says why
  if (root.high == here.high && root.low == here.low) return;
  status->fail(kExitInput, opened_here + ": the same " + with_commas(mine.id.bytes) +
                               " bytes but other contents (XXH3-128 " + short_hex(here) + " here, " +
                               short_hex(root) + " there)");
}

}  // namespace mpi
}  // namespace facegen
