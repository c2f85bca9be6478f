// shared_latents.cpp: every rank opens the latents and counts its part of their map (see the header).
#include "mpi/shared_latents.hpp"

#include <cstdint>
#include <vector>

#include "mpi/mpi_check.hpp"
#include "mpi/same_file.hpp"

namespace facegen {
namespace mpi {

bool share_latents(MPI_Comm world, const RankTopology& topo, const LatentSpec& spec, int threads,
                   std::unique_ptr<LatentSource>* source, RankStatus* status) {
  const int rank = topo.world_rank, ranks = topo.world_size;
  // Whether rank 0 reads by ranges (not when it reads in order only, or could not open the latents).
  int root_ranges = rank == 0 && *source && (*source)->random_access() ? 1 : 0;
  MPI_CHECK(MPI_Bcast(&root_ranges, 1, MPI_INT, 0, world));
  if (!root_ranges) return false;
  if (rank != 0) {
    RankStatus opening;  // a rank that cannot open the file leaves the reading to rank 0
    attempt(opening, [&] { *source = open_latents(spec); });
    if (opening.failed || !(*source)->random_access()) source->reset();
  }
  // A file that was replaced or rewritten since rank 0 opened it stops the job (at the next agreement).
  RankStatus same;
  require_same_file(world, topo, *source ? (*source)->input_file() : nullptr, &same);
  if (same.failed) {
    status->fail(same.exit_code, same.message);
    source->reset();
  }
  int everyone = *source ? 1 : 0;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &everyone, 1, MPI_INT, MPI_MIN, world));
  if (!everyone) {
    if (rank != 0) source->reset();
    return false;
  }
  (*source)->set_threads(threads);
  std::vector<int64_t> map;
  attempt(*status, [&] { map = (*source)->map_part(rank, ranks); });
  int64_t map_size = static_cast<int64_t>(map.size());  // the same on every rank (0: no map needed)
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &map_size, 1, MPI_INT64_T, MPI_MAX, world));
  if (map_size > 0) {
    map.resize(static_cast<size_t>(map_size), 0);  // a rank that failed adds zeros; its status stops the job
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, map.data(), static_cast<int>(map_size), MPI_INT64_T, MPI_SUM, world));
    attempt(*status, [&] { (*source)->set_map(std::move(map)); });
  }
  return true;
}

}  // namespace mpi
}  // namespace facegen
