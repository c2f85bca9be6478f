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
  LatentPrefetch latents(loop.latents, loop.plan, loop.latent_slots, loop.engine.piece_images(), spec.latent_dim);
  std::deque<PieceRange> in_stream;  // pieces handed to the backend, not yet done, in order
  bool first = true;
  double waits = 0;
  const auto start = Clock::now();
  auto next = [&](StreamJob& job) {
    const auto waiting = Clock::now();
    PieceRange piece;
    const float* z = nullptr;
    if (!latents.next(piece, z)) return false;
    if (first && loop.first_piece) loop.first_piece();
    first = false;
    const PieceBuffer buffer = loop.engine.acquire();
    waits += seconds_since(waiting);
    job = StreamJob{z, piece.count, {loop.engine.encoding(), buffer.images, buffer.flags, spec.latent_dim, spec.image_channels, spec.image_size}};
    in_stream.push_back(piece);
    return true;
  };
  auto done = [&](const StreamJob& job) {
    const PieceRange piece = in_stream.front();
    in_stream.pop_front();
    require_finite_flags(loop.net, loop.model_path, job.latents, job.out.flags, piece.count, piece.first, loop.threads);
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
