// same_file.hpp: whether every rank that opened an input by path reads the bytes rank 0 reads.
//
// Every rank loads the model, and where the latents allow random access every rank reads its own share
// of them, so each rank opens the path itself, at its own moment, on its own node. The file it finds
// may be rank 0's (a shared file system), or a copy of its node's own (staged on local disk with
// sbcast or cp, the way clusters keep inputs near the ranks), or a file renamed over the path or
// rewritten in place in between. So after the opens every rank's (device, inode, size, modification
// time, file system kind) of its descriptor is gathered, with its kernel's boot id. A rank opened
// rank 0's very file when it has rank 0's inode and, under the same kernel, its device, or, across
// kernels, both files are on a served file system (NFS, Lustre, GPFS: every client sees the server's
// inode numbers, and st_dev differs between clients; two nodes' own disks number their files each on
// its own, so there the same number means nothing: latents/file_system_kind.hpp). Rank 0's very file
// with another size or time changed in place between the opens: "the latent file PATH changed between
// ranks' opens: rank 2 on host X sees N bytes, rank 0 M". Any other file is compared by its bytes: a
// different size stops the job at once; the same size makes rank 0 and one rank of each other file
// (the lowest that opened it) hash the whole file (common/content_hash.hpp: XXH3-128, every byte any
// rank may read), and a digest that differs from rank 0's stops the job. The lowest failing rank
// speaks for the job at the next agreement point (agreement.hpp), in one sentence naming what differs:
//   the model file m.bin opened here is not rank 0's (host node1): 20,549,131 bytes here, 20,549,132 there
//   the latent file z.npy opened here is not rank 0's (host node1): the same 40,128 bytes but other
//     contents (XXH3-128 9f86...e1 here, 01ba...7c there)
// prefixed by the rank and host as every rank's error is. A copy of the same bytes costs one read of
// the whole file on rank 0 and on one rank per copy; a shared file costs nothing. Pipes and other
// streams are not compared.
#pragma once

#include <mpi.h>

#include "latents/input_file.hpp"
#include "mpi/agreement.hpp"
#include "mpi/rank_topology.hpp"

namespace facegen {
namespace mpi {

// Collective over `world`. `file`: this rank's open file, or null where it has none (it could not open
// it, or reads nothing); such a rank is compared with nothing, and if rank 0 has none nothing is
// compared. A difference goes to this rank's `status`, and so does a failed read of its file while
// hashing it.
void require_same_file(MPI_Comm world, const RankTopology& topo, const InputFile* file, RankStatus* status);

}  // namespace mpi
}  // namespace facegen
