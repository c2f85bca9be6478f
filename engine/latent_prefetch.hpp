// latent_prefetch.hpp: the latents of the next pieces of a plan, read ahead on the process's pool
// while earlier pieces are generated.
//
// Pieces are read one after another, in the plan's order (each read spreads over the pool by
// itself: read_range of a random-access source uses several threads), into a ring of `slots`
// buffers of (piece_images, nz) floats; a slot is read again once the piece before it in the ring was
// released. A source read in order only (a pipe) must be given a plan in image order
// (needs_image_order). The first error of a read is rethrown by next().
//
// With `recipes` (a backend that draws latents itself, Backend::draws_latents, and a drawn source),
// a slot holds the piece's recipe (LatentSource::recipe) instead of its latents: the host makes no
// latent value, only each image's seed where the source is a seed list.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/piece_plan.hpp"
#include "latents/latent_source.hpp"

namespace facegen {

// A piece's latents as next() gives them: values (piece.count, nz), or a recipe (recipes only).
struct PieceLatents {
  const float* values = nullptr;
  const LatentRecipe* recipe = nullptr;
};

class LatentPrefetch {
 public:
  LatentPrefetch(LatentSource& source, PiecePlan& plan, int slots, int64_t piece_images, int latent_dim,
                 bool recipes = false);
  ~LatentPrefetch();  // waits for the read in flight
  LatentPrefetch(const LatentPrefetch&) = delete;
  LatentPrefetch& operator=(const LatentPrefetch&) = delete;

  // The next piece of the plan and its latents, valid until its release(); false once the plan is
  // done. Waits while it is being read; rethrows a read's error.
  bool next(PieceRange& piece, PieceLatents& latents);
  void release();  // the oldest piece that next() gave is done with
  double wait_seconds() const;  // next() waiting for reads

 private:
  struct Slot {
    std::vector<float> latents;   // (piece_images, nz); empty with recipes
    std::vector<uint64_t> seeds;  // recipes: (piece_images), each image's seed where the recipe has them
    LatentRecipe recipe;
    PieceRange piece;
    bool ready = false;
  };
  // With mutex_ held: the slot that the next piece goes into, now being read, if any slot is free
  // and none is read; the caller then posts read(*slot) once it has let the mutex go.
  Slot* start_read();
  void post_read(Slot* slot);
  void read(Slot& slot) noexcept;

  LatentSource& source_;
  PiecePlan& plan_;
  int latent_dim_;
  bool recipes_;
  std::vector<std::unique_ptr<Slot>> slots_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  // Both hold at most every slot and are reserved for that, so that no step of the prefetch allocates.
  std::vector<Slot*> free_;    // to be read into
  std::vector<Slot*> queued_;  // being read or ready, in plan order
  size_t taken_ = 0;          // queued_[0 .. taken_) were given by next() and not yet released
  bool reading_ = false;
  bool plan_done_ = false;
  std::exception_ptr error_;
  double wait_seconds_ = 0;
};

}  // namespace facegen
