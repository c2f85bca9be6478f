// rank_job.hpp: one generation job spread over the ranks of an MPI job (no MPI types here, so that
// the command line can include it without MPI's headers).
//
// Every rank runs the same sequence; a rank's slice of the work comes from work_split.hpp, its device
// from choose_device (generator/backend.hpp), its output offsets from ordered_output.hpp, and the
// way ranks fail together from agreement.hpp. Order of work:
//   0. every rank opens the model file (none for --device synthetic), once, reads its shape, and
//      checks that it opened rank 0's file (same_file.hpp);
//   1. rank 0 opens the latents (a file, or --random / --interpolate / --seeds draws) and learns N (an error
//      is held until step 3, so that errors come in the same order as in the single-process
//      program); every rank learns N; where every rank can read the source by ranges, each opens it
//      too, checks it is rank 0's file, and a text file's token map is built by all (shared_latents.hpp);
//   2. rank 0 decides how many ranks generate (small jobs leave ranks out, see work_split.hpp);
//      the generating ranks load the model (through the descriptor of step 0) and start their
//      backend on their GPU;
//   3. agree; every rank checks the outputs' layout, rank 0 creates them as temporary files; agree;
//      every rank opens them;
//   4. for each round: every rank reads its own slice (or, for a pipe, rank 0 reads the round and
//      scatters it with MPI_Scatterv); agree; every rank generates its slice and hands it to its
//      writer thread, which writes it at its offsets while the next round is generated;
//   5. rank 0 checks that nothing follows the last number, and every rank that read latents that its
//      latent file did not change (input_file.hpp); every rank finishes writing (mosaic PNGs
//      are encoded, files synced and closed); agree; rank 0 puts the whole set in place, all or nothing.
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
