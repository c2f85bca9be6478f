// same_file.hpp: whether the ranks that opened an input by path opened the same file.
//
// Every rank loads the model, and where the latents allow random access every rank reads its own share
// of them, so each rank opens the path itself, at its own moment. A file renamed over the path or
// rewritten in between would feed the ranks different bytes. So after the opens every rank's
// (device, inode, size, modification time) of its descriptor is gathered: inode, size and time must be
// rank 0's on every rank, the device that of the lowest rank on the same host (st_dev numbers differ
// between NFS clients of one file). A rank whose file differs fails with one sentence, "the latent file
// PATH changed between ranks' opens: rank 2 on host X sees N bytes, rank 0 M"; the lowest such rank
// speaks for the job at the next agreement point (agreement.hpp). A node-local copy of the file is
// another file too: give every node the same file. Pipes and other streams are not compared.
#pragma once

#include <mpi.h>

#include "files/input_file.hpp"
#include "mpi/agreement.hpp"
#include "mpi/rank_topology.hpp"

namespace facegen {
namespace mpi {

// Collective over `world`. `file`: this rank's open file, or null where it has none (it could not open
// it, or reads nothing); such a rank is compared with nothing, and if rank 0 has none nothing is
// compared. A difference goes to this rank's `status`.
void require_same_file(MPI_Comm world, const RankTopology& topo, const InputFile* file, RankStatus* status);

}  // namespace mpi
}  // namespace facegen
