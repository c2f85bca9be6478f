// shared_latents.hpp: whether every rank reads its own latents, and the map a text file needs for it.
//
// Rank 0 has opened the latents (its errors come first, as in one process). When that source reads
// by ranges (a regular text or .npy file, --random, --interpolate), every other rank opens the same
// source itself; if each one could and every rank sees a file of the same size, the ranks share the
// input: a text file's token map is counted in parts, one per rank, and summed (MPI_Allreduce), and
// then each rank reads its own slice of every round. Otherwise (a pipe, a file that another node does
// not see) rank 0 reads every round and scatters it, as it must.
#pragma once

#include <mpi.h>

#include <memory>

#include "files/latent_source.hpp"
#include "mpi/agreement.hpp"

namespace facegen {
namespace mpi {

// Collective. `source`: rank 0's open source (null where it failed), null elsewhere; on return, the
// rank's own source where the ranks share the input. `threads`: this rank's threads for the map.
// Returns true when every rank reads its own slices. A failure to read the map goes to `status`.
bool share_latents(MPI_Comm world, const LatentSpec& spec, int threads, std::unique_ptr<LatentSource>* source,
                   RankStatus* status);

}  // namespace mpi
}  // namespace facegen
