// piece_loop.cpp: pieces from the plan through the backend into the output engine (see piece_loop.hpp).
#include "engine/piece_loop.hpp"

#include <algorithm>
#include <deque>

#include "common/clock.hpp"
#include "engine/latent_prefetch.hpp"
#include "generator/finite_check.hpp"

namespace facegen {

PieceLoopSeconds run_piece_loop(const PieceLoop& loop) {
  const ModelSpec& spec = loop.net.spec();
  // Drawn latents go to a backend that draws them as their recipes: the host makes none of them.
  const bool recipes = loop.backend.draws_latents() && loop.latents.drawn();
  LatentPrefetch latents(loop.latents, loop.plan, loop.latent_slots, loop.engine.piece_images(), spec.latent_dim,
                         recipes);
  std::deque<PieceRange> in_stream;  // pieces handed to the backend, not yet done, in order
  bool first = true;
  double waits = 0;
  const auto start = Clock::now();
  auto next = [&](StreamJob& job) {
    const auto waiting = Clock::now();
    PieceRange piece;
    PieceLatents z;
    if (!latents.next(piece, z)) return false;
    if (first && loop.first_piece) loop.first_piece();
    first = false;
    const PieceBuffer buffer = loop.engine.acquire();
    waits += seconds_since(waiting);
    const ImageTarget out{loop.engine.encoding(), buffer.images, buffer.flags, spec.latent_dim, spec.image_channels};
    job = StreamJob{z.values, piece.count, out, z.recipe};
    in_stream.push_back(piece);
    return true;
  };
  auto done = [&](const StreamJob& job) {
    const PieceRange piece = in_stream.front();
    in_stream.pop_front();
    if (job.recipe != nullptr) {  // the latents of the images it traces, made again on the host
      require_finite_drawn(loop.net, loop.model_path,
                           [&](int64_t i, float* out) { loop.latents.read_range(piece.first + i, 1, out); },
                           job.out.flags, piece.count, piece.first);
    } else {
      require_finite_flags(loop.net, loop.model_path, job.latents, job.out.flags, piece.count, piece.first, loop.threads);
    }
    loop.engine.submit(job.out.images, piece.first, piece.count);
    latents.release();
    if (loop.generated) loop.generated(piece.count);
  };
  loop.backend.generate_stream(next, done, loop.threads);
  PieceLoopSeconds seconds;
  seconds.parse = latents.wait_seconds();
  seconds.compute = std::max(0.0, seconds_since(start) - waits);
  return seconds;
}

}  // namespace facegen
