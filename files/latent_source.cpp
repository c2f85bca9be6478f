// latent_source.cpp: latent files, counter-based random latents, interpolation grids.
#include "files/latent_source.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "files/latents.hpp"
#include "common/model_shape.hpp"

namespace facegen {
namespace {

// The splitmix64 output function (Steele, Lea, Flood 2014): a well-mixed 64-bit hash of a counter.
uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

double unit_interval(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }  // [0, 1)

class FileLatents : public LatentSource {
 public:
  explicit FileLatents(const std::string& path) : reader_(path), path_(path) {}
  int64_t count() const override { return reader_.count(); }
  int64_t read(float* dst, int64_t max_images) override { return reader_.read(dst, max_images); }
  void finish() override { reader_.finish(); }
  std::string describe() const override { return path_; }

 private:
  LatentReader reader_;
  std::string path_;
};

class RandomLatents : public LatentSource {
 public:
  RandomLatents(int64_t count, uint64_t seed, int64_t first) : count_(count), seed_(seed), next_(first), first_(first) {}
  int64_t count() const override { return count_; }
  int64_t read(float* dst, int64_t max_images) override {
    const int64_t n = std::min(max_images, first_ + count_ - next_);
    for (int64_t i = 0; i < n; ++i, ++next_)
      for (int v = 0; v < kLatentDim; ++v)
        dst[i * kLatentDim + v] = static_cast<float>(random_latent_value(seed_, next_, v));
    return n;
  }
  void finish() override {}
  std::string describe() const override {
    return std::to_string(count_) + " random latents, N(0, 1), seed " + std::to_string(seed_);
  }

 private:
  int64_t count_;
  uint64_t seed_;
  int64_t next_;
  int64_t first_;
};

class InterpolationLatents : public LatentSource {
 public:
  InterpolationLatents(int64_t side, uint64_t seed) : side_(side), seed_(seed) {}
  int64_t count() const override { return side_ * side_; }
  int64_t read(float* dst, int64_t max_images) override {
    const int64_t n = std::min(max_images, count() - next_);
    for (int64_t i = 0; i < n; ++i, ++next_) {
      const int64_t row = next_ / side_, step = next_ % side_;
      const double t = side_ > 1 ? static_cast<double>(step) / static_cast<double>(side_ - 1) : 0.0;
      slerp(2 * row, 2 * row + 1, t, dst + i * kLatentDim);
    }
    return n;
  }
  void finish() override {}
  std::string describe() const override {
    return std::to_string(side_) + " interpolations of " + std::to_string(side_) + " steps, seed " +
           std::to_string(seed_);
  }

 private:
  // out (100) = sin((1-t)w)/sin(w) a + sin(tw)/sin(w) b, w the angle between a and b.
  void slerp(int64_t from, int64_t to, double t, float* out) const {
    double a[kLatentDim], b[kLatentDim], dot = 0, na = 0, nb = 0;
    for (int v = 0; v < kLatentDim; ++v) {
      a[v] = random_latent_value(seed_, from, v);
      b[v] = random_latent_value(seed_, to, v);
      dot += a[v] * b[v];
      na += a[v] * a[v];
      nb += b[v] * b[v];
    }
    const double cosine = std::clamp(dot / std::sqrt(na * nb), -1.0, 1.0);
    const double omega = std::acos(cosine);
    double wa = 1 - t, wb = t;  // nearly parallel: the straight line is the arc
    if (std::sin(omega) > 1e-6) {
      wa = std::sin((1 - t) * omega) / std::sin(omega);
      wb = std::sin(t * omega) / std::sin(omega);
    }
    for (int v = 0; v < kLatentDim; ++v) out[v] = static_cast<float>(wa * a[v] + wb * b[v]);
  }

  int64_t side_;
  uint64_t seed_;
  int64_t next_ = 0;
};

}  // namespace

double random_latent_value(uint64_t seed, uint64_t image, uint64_t value) {
  const uint64_t key = mix64(mix64(mix64(seed) ^ image) ^ value);
  const double u1 = 1.0 - unit_interval(mix64(key ^ 1));  // (0, 1]: log(u1) is finite
  const double u2 = unit_interval(mix64(key ^ 2));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

std::unique_ptr<LatentSource> open_latent_file(const std::string& path) {
  return std::make_unique<FileLatents>(path);
}

std::unique_ptr<LatentSource> make_random_latents(int64_t count, uint64_t seed, int64_t first) {
  return std::make_unique<RandomLatents>(count, seed, first);
}

std::unique_ptr<LatentSource> make_interpolation_latents(int64_t side, uint64_t seed) {
  return std::make_unique<InterpolationLatents>(side, seed);
}

std::unique_ptr<LatentSource> open_latents(const LatentSpec& spec) {
  if (spec.interpolate_side > 0) return make_interpolation_latents(spec.interpolate_side, spec.seed);
  if (spec.random_count > 0) return make_random_latents(spec.random_count, spec.seed);
  return open_latent_file(spec.path);
}

}  // namespace facegen
