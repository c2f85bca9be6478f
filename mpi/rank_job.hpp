// rank_job.hpp: one generation job spread over the ranks of an MPI job (no MPI types here, so that
// the command line can include it without MPI's headers).
//
// Every rank runs the same sequence; a rank's share of the work comes from work_split.hpp, its device
// from choose_device (generator/backend.hpp), its writing from the output engine (engine/), and the
// way ranks fail together from agreement.hpp. Order of work:
//   0. every rank opens the model file (none for --device synthetic), once, reads its shape, and
//      checks that it opened rank 0's file, or a copy of its bytes (same_file.hpp);
//   1. rank 0 opens the latents (a file, or --random / --interpolate / --seeds draws) and learns N (an error
//      is held until step 2, so that errors come in the same order as in the single-process
//      program); every rank learns N; where every rank can read the source by ranges, each opens it
//      too, checks it is rank 0's file, and a text file's token map is built by all (shared_latents.hpp);
//   2. rank 0 takes the prefix's lock and checks what the run may replace; it decides how many ranks
//      generate (small jobs leave ranks out); the job is cut at its outputs' files' edges and each
//      generating rank gets whole blocks (work_split.hpp), loads the model and starts its backend;
//   3. rank 0 makes its first output files as temporaries, then every other rank checks it sees them
//      and makes its own; agree;
//   4. every rank runs the engine over its share, on its own (no collective until step 5);
//   5. rank 0 checks that nothing follows the last number, and every rank that read latents that its
//      latent file did not change (input_file.hpp); every rank syncs its files and sends their names to
//      rank 0, which takes them over and, once all agree, puts the whole set in place, all or nothing.
// By default rank 0 prints one summary; with `verbose` every rank reports its host, rank, local
// rank and GPU (name and PCI bus id), printed by rank 0 in rank order.
#pragma once

#include <cstdint>

#include "run/pipeline.hpp"

namespace facegen {
namespace mpi {

struct RankJobOptions {
  bool verbose = false;              // every rank reports where it runs
  bool quiet = false;                // nothing but errors
  bool all_ranks = false;            // every rank generates, however small the job
  int64_t min_images_per_rank = 0;   // 0: the default for the backend (see rank_job.cpp)
};

// Starts MPI, runs the job as one rank, ends MPI. Returns the exit status for this process:
// 0, or the status of the first rank that failed (1 bad input, 3 a fault), the same on every rank.
int run_as_rank(const GenerateRequest& request, const RankJobOptions& options);

// A rank whose command line failed before the job began returns through this with its exit status.
// Every rank fails alike there and rank 0 has said why; the ranks meet once in MPI (ten seconds at
// most), so that none ends before rank 0's line is out: the launcher would otherwise report the
// first rank to end as one that ended without a message.
int end_rank_before_job(int status);

// Whether this build can run as a rank (false when built without MPI).
bool mpi_available();

}  // namespace mpi
}  // namespace facegen
