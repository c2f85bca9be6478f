// launcher_watch.hpp: a rank never outlives the launcher that started it.
//
// A rank's parent is what started it: mpirun on its own node, an orted on another node (or under
// Slurm with mpirun), slurmstepd under srun. When that process dies (SIGKILL to mpirun, the OOM
// killer), the rank is reparented and nothing would stop it but OpenMPI 4.1's own reaction, which
// ends it with exit(-61) (status 195) a second or more later, when its PMIx client notices, without
// removing its temporary files or the prefix's lock. So a rank watches its parent: a thread looks at
// getppid() every 200 ms, and when the parent it started with is gone the rank says so in one line
// and sends itself SIGTERM, the signal a live launcher would have sent: the stop handlers
// (common/stop_signals.hpp) remove its temporaries and the lock, as on any stop. Where SIGTERM does not
// end it within 10 s (ignored from its parent), SIGKILL does; the launcher script cleans up after that.
// No MPI call: it runs before MPI starts and beside whatever MPI is doing. The watching thread blocks
// every signal, so that it never takes one meant for the threads that handle them.
#pragma once

namespace facegen {
namespace mpi {

// Starts the watch (once; a detached thread). `rank_hint`: the launcher's rank number, for the line.
// Does nothing where the parent is already init (pid 1): nothing started this process to watch.
void watch_launcher(int rank_hint);

}  // namespace mpi
}  // namespace facegen
