// rank_topology.cpp: ranks, nodes and GPUs (see rank_topology.hpp).
#include "mpi/rank_topology.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "common/threads.hpp"
#include "mpi/mpi_check.hpp"

namespace facegen {
namespace mpi {

RankTopology discover_topology(MPI_Comm world) {
  RankTopology topo;
  MPI_CHECK(MPI_Comm_rank(world, &topo.world_rank));
  MPI_CHECK(MPI_Comm_size(world, &topo.world_size));

  MPI_Comm local;
  MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, topo.world_rank, MPI_INFO_NULL, &local));
  MPI_CHECK(MPI_Comm_rank(local, &topo.local_rank));
  MPI_CHECK(MPI_Comm_size(local, &topo.local_size));

  // Number the nodes: the local leaders (local rank 0) form a communicator of their own.
  MPI_Comm leaders;
  MPI_CHECK(MPI_Comm_split(world, topo.local_rank == 0 ? 0 : MPI_UNDEFINED, topo.world_rank, &leaders));
  int index = 0;
  if (leaders != MPI_COMM_NULL) {
    MPI_CHECK(MPI_Comm_rank(leaders, &index));
    MPI_CHECK(MPI_Comm_size(leaders, &topo.node_count));
    MPI_CHECK(MPI_Comm_free(&leaders));
  }
  MPI_CHECK(MPI_Bcast(&index, 1, MPI_INT, 0, local));
  topo.node_index = index;
  MPI_CHECK(MPI_Bcast(&topo.node_count, 1, MPI_INT, 0, world));
  MPI_CHECK(MPI_Comm_free(&local));

  char name[MPI_MAX_PROCESSOR_NAME];
  int length = 0;
  MPI_CHECK(MPI_Get_processor_name(name, &length));
  topo.host.assign(name, static_cast<size_t>(length));
  return topo;
}

int cpu_threads_for_rank(int ranks_sharing) {
  const int machine = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int allowed = available_cpus();
  if (allowed < machine) return allowed;  // bound by the launcher, a quota or a variable: these are this rank's
  return std::max(1, allowed / std::max(1, ranks_sharing));
}

}  // namespace mpi
}  // namespace facegen
