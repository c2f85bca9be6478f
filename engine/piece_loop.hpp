// piece_loop.hpp: the loop that feeds a backend the pieces of a plan and hands their images to the
// output engine, the same for one process and for each rank of an MPI job.
//
// Each piece's latents are read ahead on the pool (latent_prefetch.hpp), or, for a backend that
// draws latents and a source of drawn ones, only their recipes (the backend makes them); the backend takes the
// pieces as one stream (Backend::generate_stream: a GPU is kept busy from one piece to the next);
// each piece's images are checked for NaN and Inf (generator/finite_check.hpp) and submitted to the
// engine. Any error (a read, a non-finite image, the engine's first error) ends the loop by throwing.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "engine/output_engine.hpp"
#include "engine/piece_plan.hpp"
#include "latents/latent_source.hpp"
#include "generator/backend.hpp"
#include "generator/network.hpp"

namespace facegen {

struct PieceLoop {
  Backend& backend;
  OutputEngine& engine;
  PiecePlan& plan;
  LatentSource& latents;
  int latent_slots;                 // pieces of latents read ahead
  const Network& net;               // names the layer behind a non-finite image
  std::string model_path;           // for that message
  int threads = 0;                  // CPU threads of the backend's own loops and the checks
  std::function<void()> first_piece;               // before the first piece is generated (a notice)
  std::function<void(int64_t count)> generated;    // after each piece is checked and submitted
};

struct PieceLoopSeconds {
  double parse = 0;    // waiting for latents that reading had not made ready
  double compute = 0;  // generation and the finite check, not counting the waits for latents and buffers
};

PieceLoopSeconds run_piece_loop(const PieceLoop& loop);

}  // namespace facegen
