// polite_wait.hpp: waiting for other ranks without keeping a CPU core busy.
//
// OpenMPI's blocking calls poll: a rank waiting in MPI_Allreduce for a slower rank spins a core at
// 100%. That is harmless beside a GPU, but a CPU-backend rank that waits (or sits out a small job)
// would take a core from the ranks that compute on the same node. So the collectives that wait for
// other ranks' work are started non-blocking and finished here: MPI_Test in a tight loop for the
// first 100 microseconds (short waits stay short), then with sleeps growing to 1 ms between tests.
#pragma once

#include <mpi.h>

namespace facegen {
namespace mpi {

void wait_politely(MPI_Request* request);

}  // namespace mpi
}  // namespace facegen
