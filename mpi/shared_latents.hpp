// shared_latents.hpp: whether every rank reads its own latents, and the map a text file needs for it.
//
// Rank 0 has opened the latents (its errors come first, as in one process). When that source reads
// by ranges (a regular text or .npy file, --random, --interpolate, --seeds), every other rank opens the same
// source itself; if each one could, the ranks share the input: a text file's token map is counted in
// parts, one per rank, and summed (MPI_Allreduce), and then each rank reads its own slice of every
// round through the descriptor it opened. Otherwise (a pipe, a file that another node does not see,
// or that was deleted since rank 0 opened it) rank 0 reads every round and scatters it, as it must. A
// rank that opened another file than rank 0's (renamed over, rewritten: same_file.hpp) fails the job.
#pragma once

#include <mpi.h>

#include <memory>

#include "latents/latent_source.hpp"
#include "mpi/agreement.hpp"
#include "mpi/rank_topology.hpp"

namespace facegen {
namespace mpi {

// Collective. `source`: rank 0's open source (null where it failed), null elsewhere; on return, the
// rank's own source where the ranks share the input. `threads`: this rank's threads for the map.
// Returns true when every rank reads its own slices. A failure to read the map, or a file that is not
// rank 0's, goes to `status`.
bool share_latents(MPI_Comm world, const RankTopology& topo, const LatentSpec& spec, int threads,
                   std::unique_ptr<LatentSource>* source, RankStatus* status);

}  // namespace mpi
}  // namespace facegen
