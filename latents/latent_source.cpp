// latent_source.cpp: choosing a latent file's reader, counter-based random latents, the latents of a
// seed list, interpolation grids.
#include "latents/latent_source.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

#include "common/errors.hpp"
#include "common/model_shape.hpp"
#include "common/threads.hpp"
#include "latents/npy_latents.hpp"
#include "latents/text_latents.hpp"

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

class RandomLatents : public LatentSource {
 public:
  RandomLatents(int64_t count, uint64_t seed, int64_t first, int latent_dim)
      : count_(count), seed_(seed), next_(first), first_(first), latent_dim_(latent_dim) {}
  int64_t count() const override { return count_; }
  int64_t read(float* dst, int64_t max_images) override {
    const int64_t n = std::min(max_images, first_ + count_ - next_);
    draw(next_, n, dst);
    next_ += n;
    return n;
  }
  bool random_access() const override { return true; }
  void read_range(int64_t first, int64_t count, float* dst) override {
    if (first < 0 || count < 0 || first + count > count_) throw std::invalid_argument("read_range: images out of range");
    draw(first_ + first, count, dst);
  }
  void finish() override {}
  std::string describe() const override {
    return std::to_string(count_) + " random latents, N(0, 1), seed " + std::to_string(seed_);
  }

 private:
  // Images [image, image + n) of the seed's sequence into dst, (n, nz).
  void draw(int64_t image, int64_t n, float* dst) const {
    parallel_for(n, std::min(threads(), static_cast<int>(std::max<int64_t>(1, n / 64))), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        for (int v = 0; v < latent_dim_; ++v)
          dst[i * latent_dim_ + v] = static_cast<float>(random_latent_value(seed_, image + i, v));
    });
  }

  int64_t count_;
  uint64_t seed_;
  int64_t next_;
  int64_t first_;
  int latent_dim_;  // nz
};

class SeedLatents : public RangeLatentSource {
 public:
  SeedLatents(std::shared_ptr<const SeedList> seeds, int latent_dim) : seeds_(std::move(seeds)), latent_dim_(latent_dim) {}
  int64_t count() const override { return seeds_->count(); }
  void read_range(int64_t first, int64_t count, float* dst) override {
    check_range(first, count);
    const int threads_used = std::min(threads(), static_cast<int>(std::max<int64_t>(1, count / 64)));
    parallel_for(count, threads_used, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) seed_latent(seeds_->seed_at(first + i), latent_dim_, dst + i * latent_dim_);
    });
  }
  void finish() override {}
  // The summary states the count beside this.
  std::string describe() const override { return "N(0, 1) latents of " + seeds_->describe(false); }

 private:
  std::shared_ptr<const SeedList> seeds_;
  int latent_dim_;  // nz
};

class InterpolationLatents : public RangeLatentSource {
 public:
  InterpolationLatents(int64_t side, uint64_t seed, int latent_dim) : side_(side), seed_(seed), latent_dim_(latent_dim) {}
  int64_t count() const override { return side_ * side_; }
  void read_range(int64_t first, int64_t count, float* dst) override {
    check_range(first, count);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t row = (first + i) / side_, step = (first + i) % side_;
      const double t = side_ > 1 ? static_cast<double>(step) / static_cast<double>(side_ - 1) : 0.0;
      slerp(2 * row, 2 * row + 1, t, dst + i * latent_dim_);
    }
  }
  void finish() override {}
  std::string describe() const override {
    return std::to_string(side_) + " interpolations of " + std::to_string(side_) + " steps, seed " +
           std::to_string(seed_);
  }

 private:
  // out (nz) = sin((1-t)w)/sin(w) a + sin(tw)/sin(w) b, w the angle between a and b.
  void slerp(int64_t from, int64_t to, double t, float* out) const {
    std::vector<double> a(static_cast<size_t>(latent_dim_)), b(a.size());
    double dot = 0, na = 0, nb = 0;
    for (int v = 0; v < latent_dim_; ++v) {
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
    for (int v = 0; v < latent_dim_; ++v) out[v] = static_cast<float>(wa * a[v] + wb * b[v]);
  }

  int64_t side_;
  uint64_t seed_;
  int latent_dim_;  // nz
};

}  // namespace

double random_latent_value(uint64_t seed, uint64_t image, uint64_t value) {
  const uint64_t key = mix64(mix64(mix64(seed) ^ image) ^ value);
  const double u1 = 1.0 - unit_interval(mix64(key ^ 1));  // (0, 1]: log(u1) is finite
  const double u2 = unit_interval(mix64(key ^ 2));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

void seed_latent(uint64_t seed, int latent_dim, float* out) {
  for (int v = 0; v < latent_dim; ++v) out[v] = static_cast<float>(random_latent_value(seed, 0, v));
}

void LatentSource::read_range(int64_t, int64_t, float*) {
  throw std::logic_error("read_range on " + describe() + ", which is read in order only");
}

int LatentSource::threads() const { return resolve_threads(threads_); }

int64_t RangeLatentSource::read(float* dst, int64_t max_images) {
  const int64_t images = std::min(max_images, count() - next_);
  read_range(next_, images, dst);
  next_ += images;
  return images;
}

void RangeLatentSource::check_range(int64_t first, int64_t images) const {
  if (first < 0 || images < 0 || first + images > count()) {
    throw std::invalid_argument("read_range: images [" + std::to_string(first) + ", " +
                                std::to_string(first + images) + ") of " + std::to_string(count()));
  }
}

std::unique_ptr<LatentSource> open_latent_file(const std::string& path, int latent_dim) {
  auto file = std::make_shared<const InputFile>(path, InputKind::Latents);
  // Only a regular file is looked into: the bytes of a pipe would be gone for the reader.
  if (file->regular()) {
    std::string start(static_cast<size_t>(std::min<int64_t>(6, file->bytes())), '\0');
    file->read_at(0, static_cast<int64_t>(start.size()), start.data());
    const bool npy_name = path.size() >= 4 && path.compare(path.size() - 4, 4, ".npy") == 0;
    if (has_npy_magic(start) || npy_name) return open_npy_latents(std::move(file), latent_dim);
  }
  return open_text_latents(std::move(file), latent_dim);
}

std::unique_ptr<LatentSource> make_random_latents(int64_t count, uint64_t seed, int64_t first, int latent_dim) {
  return std::make_unique<RandomLatents>(count, seed, first, latent_dim);
}

std::unique_ptr<LatentSource> make_interpolation_latents(int64_t side, uint64_t seed, int latent_dim) {
  return std::make_unique<InterpolationLatents>(side, seed, latent_dim);
}

std::unique_ptr<LatentSource> make_seed_latents(std::shared_ptr<const SeedList> seeds, int latent_dim) {
  return std::make_unique<SeedLatents>(std::move(seeds), latent_dim);
}

ImageSeeds LatentSpec::image_seeds() const {
  if (!seeds) return [](int64_t) { return std::optional<uint64_t>(); };
  return [list = seeds](int64_t image) { return std::optional<uint64_t>(list->seed_at(image)); };
}

std::unique_ptr<LatentSource> open_latents(const LatentSpec& spec) {
  const int latent_dim = spec.latent_dim;
  if (spec.seeds) return make_seed_latents(spec.seeds, latent_dim);
  if (spec.interpolate_side > 0) return make_interpolation_latents(spec.interpolate_side, spec.seed, latent_dim);
  if (spec.random_count > 0) return make_random_latents(spec.random_count, spec.seed, 0, latent_dim);
  return open_latent_file(spec.path, latent_dim);
}

}  // namespace facegen
