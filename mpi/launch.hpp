// launch.hpp: was this process started as one rank of an MPI job, or on its own?
//
// build/facegen is one program: started plainly it is the single-process generator; started by
// mpirun (OpenMPI sets OMPI_COMM_WORLD_SIZE) or by srun --mpi=pmix / pmi2 (PMIX_RANK, PMI_RANK) it
// becomes one rank of a parallel job. srun without an MPI plugin starts N copies that cannot talk
// to each other and would all write the same files: that is refused with a message saying how to
// start it. Reads the environment only; no MPI call.
#pragma once

#include <string>

namespace facegen {
namespace mpi {

enum class LaunchKind {
  SingleProcess,  // no launcher: the ordinary program
  Rank,           // one rank of an MPI job
  Unusable,       // started as one of several tasks with no way to reach the others
};

struct Launch {
  LaunchKind kind = LaunchKind::SingleProcess;
  int rank_hint = 0;    // the launcher's rank number, for messages printed before MPI starts
  std::string problem;  // for Unusable: what to do instead
};

Launch detect_launch();

// True when this process should print messages that every rank would print alike (usage errors):
// rank 0 of a job, or a process on its own.
bool prints_shared_messages(const Launch& launch);

}  // namespace mpi
}  // namespace facegen
