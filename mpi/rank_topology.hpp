// rank_topology.hpp: where each rank runs (its GPU is chosen by choose_device in generator/backend.hpp).
//
// The node-local rank comes from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED): the ranks that share
// memory with this one, numbered 0..local_size-1 in world-rank order. A rank uses GPU
// (local_rank mod visible), where `visible` is the number of devices CUDA shows this process:
// CUDA_VISIBLE_DEVICES is honoured as it stands. Under `srun --gpus-per-task=1` every rank sees one
// GPU (its own) and uses device 0; under salloc/sbatch + mpirun every rank sees all of the node's
// GPUs and the local rank picks one; with more ranks than GPUs on a node, ranks share GPUs.
#pragma once

#include <mpi.h>

#include <string>

namespace facegen {
namespace mpi {

struct RankTopology {
  int world_rank = 0;
  int world_size = 1;
  int local_rank = 0;  // among the ranks on this node
  int local_size = 1;
  int node_count = 1;  // nodes (shared-memory domains) in the job
  int node_index = 0;  // this node's number, 0..node_count-1, in the order of their lowest rank
  std::string host;
};

// Collective over `world`.
RankTopology discover_topology(MPI_Comm world);

// CPU threads for a CPU-backend rank: the CPUs this process may run on, shared among the
// `ranks_sharing` ranks on its node, unless the launcher already bound it to fewer CPUs than the
// machine has (then those CPUs are its own). At least 1.
int cpu_threads_for_rank(int ranks_sharing);

}  // namespace mpi
}  // namespace facegen
