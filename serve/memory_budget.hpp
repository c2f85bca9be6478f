// memory_budget.hpp: a bound on the bytes that every connection together may hold in request bodies.
//
// Each request body may be up to 32 MiB, and an event loop holds thousands of connections: without a
// bound shared by all of them, many clients sending large bodies at once (or slowly) could take more
// memory than the machine has. A body claims its announced length (Content-Length) or each chunk as it
// is announced (chunked) before it is read; a claim that would pass the budget is refused (the request
// gets 503), and a claim is given back when its request is answered (Claim's destructor). Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>

namespace facegen::serve {

class MemoryBudget {
 public:
  explicit MemoryBudget(int64_t bytes) : limit_(bytes) {}
  int64_t limit() const { return limit_; }
  int64_t used() const { return used_.load(std::memory_order_relaxed); }

  // A share of a budget, given back when it is destroyed. Empty (nothing claimed) by default.
  class Claim {
   public:
    Claim() = default;
    Claim(Claim&& other) noexcept : budget_(other.budget_), bytes_(other.bytes_) { other.bytes_ = 0; }
    Claim& operator=(Claim&& other) noexcept {
      if (this != &other) {
        release();
        budget_ = other.budget_;
        bytes_ = other.bytes_;
        other.bytes_ = 0;
      }
      return *this;
    }
    Claim(const Claim&) = delete;
    Claim& operator=(const Claim&) = delete;
    ~Claim() { release(); }
    // Claims `bytes` more of `budget`; false (nothing claimed) where that would pass its limit.
    bool grow(MemoryBudget& budget, int64_t bytes) {
      if (bytes_ > 0 && budget_ != &budget) return false;
      if (!budget.take(bytes)) return false;
      budget_ = &budget;
      bytes_ += bytes;
      return true;
    }
    int64_t bytes() const { return bytes_; }

   private:
    void release() {
      if (bytes_ > 0) budget_->used_.fetch_sub(bytes_, std::memory_order_relaxed);
      bytes_ = 0;
    }
    MemoryBudget* budget_ = nullptr;
    int64_t bytes_ = 0;
  };

 private:
  bool take(int64_t bytes) {
    int64_t now = used_.load(std::memory_order_relaxed);
    do {
      if (bytes > limit_ - now) return false;
    } while (!used_.compare_exchange_weak(now, now + bytes, std::memory_order_relaxed));
    return true;
  }
  const int64_t limit_;
  std::atomic<int64_t> used_{0};
};

}  // namespace facegen::serve
