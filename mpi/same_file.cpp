// same_file.cpp: gathering every rank's file identity and comparing it (see same_file.hpp).
#include "mpi/same_file.hpp"

#include <cstdint>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "common/text_format.hpp"
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

// How `mine` differs from the reference rank's `theirs`, as "sees X, rank R Y"; "" when it does not.
std::string difference(const FileIdentity& mine, const FileIdentity& theirs, int reference, bool same_host) {
  const std::string rank = "rank " + std::to_string(reference);
  if (mine.bytes != theirs.bytes) return "sees " + with_commas(mine.bytes) + " bytes, " + rank + " " + with_commas(theirs.bytes);
  if (mine.modified_ns != theirs.modified_ns) {
    return "sees it modified at " + time_text(mine.modified_ns) + ", " + rank + " at " + time_text(theirs.modified_ns);
  }
  if (mine.inode != theirs.inode) {
    return "sees inode " + std::to_string(mine.inode) + ", " + rank + " inode " + std::to_string(theirs.inode) +
           " (another file of the same size and time)";
  }
  if (same_host && mine.device != theirs.device) {
    return "sees device " + std::to_string(mine.device) + ", " + rank + " on the same host device " +
           std::to_string(theirs.device);
  }
  return "";
}

}  // namespace

void require_same_file(MPI_Comm world, const RankTopology& topo, const InputFile* file, RankStatus* status) {
  OpenedFile mine{};
  mine.opened = file != nullptr && file->regular() ? 1 : 0;
  if (mine.opened) mine.id = file->identity();
  mine.node = topo.node_index;
  std::vector<OpenedFile> all(static_cast<size_t>(topo.world_size));
  MPI_Request request;
  MPI_CHECK(MPI_Iallgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, world, &request));
  wait_politely(&request);  // a rank may still be opening, or reading its model
  if (!mine.opened || !all[0].opened || topo.world_rank == 0) return;
  // Inode, size and time against rank 0; the device against the lowest rank of this host that has a file.
  std::string how = difference(mine.id, all[0].id, 0, all[0].node == mine.node);
  if (how.empty()) {
    for (int r = 0; r < topo.world_rank; ++r) {
      const OpenedFile& other = all[static_cast<size_t>(r)];
      if (!other.opened || other.node != mine.node) continue;
      how = difference(mine.id, other.id, r, true);
      break;
    }
  }
  if (how.empty()) return;
  status->fail(kExitInput, "the " + file->what() + " changed between ranks' opens: rank " +
                               std::to_string(topo.world_rank) + " on host " + topo.host + " " + how);
}

}  // namespace mpi
}  // namespace facegen
