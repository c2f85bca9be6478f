// serve_ranks.hpp: `facegen serve` as the ranks of an MPI job (run_parallel.sh --serve): rank 0 runs
// the HTTP service, and every rank, rank 0 included, generates on its own device (the GPU of its
// node-local rank, or the CPU). Rank 0's batcher gets one worker for its own backend and one for each
// other rank, whose backend forwards each batch: the latents (n, nz) go to that rank, which
// generates them and sends back the images (n, S, S, nc). When the service stops, rank 0 tells
// every rank to end and all leave MPI together. Ranks other than 0 never stop on a signal of their
// own: the launcher's SIGTERM reaches rank 0, which ends them once its requests are answered.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "generator/backend.hpp"
#include "generator/network.hpp"

namespace facegen {
namespace mpi {

// Called on rank 0 with the job's backends (its own first, then one per other rank); returns the
// exit status. Signals must already be blocked in this thread (they are, in every thread MPI makes).
using ServeWith = std::function<int(std::vector<std::unique_ptr<Backend>> backends)>;

// Starts MPI, makes this rank's backend (choose_device with its node-local rank), and runs `serve`
// on rank 0 or the generating loop elsewhere. Throws UserError where MPI is not built in.
int serve_as_ranks(const Network& net, const BackendOptions& options, const ServeWith& serve);

}  // namespace mpi
}  // namespace facegen
