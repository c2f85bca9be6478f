// latent_prefetch.cpp: latents read ahead of generation (see latent_prefetch.hpp).
#include "engine/latent_prefetch.hpp"

#include <stdexcept>

#include "common/clock.hpp"
#include "common/work_pool.hpp"

namespace facegen {

LatentPrefetch::LatentPrefetch(LatentSource& source, PiecePlan& plan, int slots, int64_t piece_images, int latent_dim,
                               bool recipes)
    : source_(source), plan_(plan), latent_dim_(latent_dim), recipes_(recipes) {
  if (slots < 1 || piece_images < 1) throw std::invalid_argument("LatentPrefetch: no slots");
  if (recipes && !source.drawn()) throw std::invalid_argument("LatentPrefetch: recipes of latents that are not drawn");
  free_.reserve(static_cast<size_t>(slots));
  queued_.reserve(static_cast<size_t>(slots));
  for (int s = 0; s < slots; ++s) {
    slots_.push_back(std::make_unique<Slot>());
    if (recipes) slots_.back()->seeds.resize(static_cast<size_t>(piece_images));
    else slots_.back()->latents.resize(static_cast<size_t>(piece_images) * latent_dim);
    free_.push_back(slots_.back().get());
  }
  Slot* slot;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    slot = start_read();
  }
  post_read(slot);
}

LatentPrefetch::~LatentPrefetch() {
  std::unique_lock<std::mutex> lock(mutex_);
  plan_done_ = true;  // no read starts after the one in flight
  changed_.wait(lock, [&] { return !reading_; });
}

LatentPrefetch::Slot* LatentPrefetch::start_read() {
  if (reading_ || plan_done_ || error_ || free_.empty()) return nullptr;
  PieceRange piece;
  if (!plan_.next(piece)) {
    plan_done_ = true;
    changed_.notify_all();
    return nullptr;
  }
  Slot* slot = free_.back();
  free_.pop_back();
  slot->piece = piece;
  slot->ready = false;
  queued_.push_back(slot);
  reading_ = true;
  return slot;
}

void LatentPrefetch::post_read(Slot* slot) {
  if (slot != nullptr) WorkPool::process().post([this, slot] { read(*slot); });
}

void LatentPrefetch::read(Slot& slot) noexcept {
  std::exception_ptr error;
  try {
    if (recipes_) {
      slot.recipe = source_.recipe(slot.piece.first, slot.piece.count, slot.seeds.data());
    } else if (source_.random_access()) {
      source_.read_range(slot.piece.first, slot.piece.count, slot.latents.data());
    } else if (source_.read(slot.latents.data(), slot.piece.count) != slot.piece.count) {
      throw std::logic_error("LatentPrefetch: the source ended before the plan");
    }
  } catch (...) {
    error = std::current_exception();
  }
  Slot* next = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    reading_ = false;
    slot.ready = true;
    if (error && !error_) error_ = error;
    next = start_read();
    changed_.notify_all();
  }
  post_read(next);
}

bool LatentPrefetch::next(PieceRange& piece, PieceLatents& latents) {
  const auto start = Clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] {
    return error_ || (taken_ < queued_.size() && queued_[taken_]->ready) || (plan_done_ && taken_ == queued_.size());
  });
  wait_seconds_ += seconds_since(start);
  if (error_) std::rethrow_exception(error_);
  if (taken_ == queued_.size()) return false;
  Slot* slot = queued_[taken_++];
  piece = slot->piece;
  latents = recipes_ ? PieceLatents{nullptr, &slot->recipe} : PieceLatents{slot->latents.data(), nullptr};
  return true;
}

void LatentPrefetch::release() {
  Slot* next;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (taken_ == 0) throw std::logic_error("LatentPrefetch::release: nothing taken");
    free_.push_back(queued_.front());
    queued_.erase(queued_.begin());
    --taken_;
    next = start_read();
  }
  post_read(next);
}

double LatentPrefetch::wait_seconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return wait_seconds_;
}

}  // namespace facegen
