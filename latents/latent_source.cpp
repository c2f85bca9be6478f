// latent_source.cpp: choosing a latent file's reader, counter-based random latents, the latents of a
// seed list, interpolation grids.
#include "latents/latent_source.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
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

// The truncation of a source's --truncation T (0: none).
Truncation truncation_of(double limit) { return limit > 0 ? truncation_to(limit) : Truncation{}; }

// ", truncated to [-T, T]" for the descriptions, or "" for T = 0.
std::string truncated_text(double limit) {
  if (!(limit > 0)) return "";
  char text[32];
  std::snprintf(text, sizeof text, "%g", limit);
  return std::string(", truncated to [-") + text + ", " + text + "]";
}

class RandomLatents : public LatentSource {
 public:
  RandomLatents(int64_t count, uint64_t seed, int64_t first, int latent_dim, double truncation)
      : count_(count), seed_(seed), next_(first), first_(first), latent_dim_(latent_dim), limit_(truncation),
        truncation_(truncation_of(truncation)) {}
  int64_t count() const override { return count_; }
  int64_t read(float* dst, int64_t max_images) override {
    const int64_t n = std::min(max_images, first_ + count_ - next_);
    draw(next_, n, dst);
    next_ += n;
    return n;
  }
  bool random_access() const override { return true; }
  void read_range(int64_t first, int64_t count, float* dst) override {
    check(first, count);
    draw(first_ + first, count, dst);
  }
  bool drawn() const override { return true; }
  LatentRecipe recipe(int64_t first, int64_t count, uint64_t*) const override {
    check(first, count);
    return LatentRecipe{seed_, first_ + first, nullptr, truncation_};
  }
  void finish() override {}
  std::string describe() const override {
    return std::to_string(count_) + " random latents, N(0, 1)" + truncated_text(limit_) + ", seed " + std::to_string(seed_);
  }

 private:
  void check(int64_t first, int64_t count) const {
    if (first < 0 || count < 0 || first + count > count_) throw std::invalid_argument("read_range: images out of range");
  }
  // Images [image, image + n) of the seed's sequence into dst, (n, nz).
  void draw(int64_t image, int64_t n, float* dst) const {
    const LatentRecipe recipe{seed_, image, nullptr, truncation_};
    parallel_for(n, std::min(threads(), static_cast<int>(std::max<int64_t>(1, n / 64))), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        for (int v = 0; v < latent_dim_; ++v) dst[i * latent_dim_ + v] = recipe_value(recipe, i, v);
    });
  }

  int64_t count_;
  uint64_t seed_;
  int64_t next_;
  int64_t first_;
  int latent_dim_;  // nz
  double limit_;    // --truncation T, 0: none
  Truncation truncation_;
};

class SeedLatents : public RangeLatentSource {
 public:
  SeedLatents(std::shared_ptr<const SeedList> seeds, int latent_dim, double truncation)
      : seeds_(std::move(seeds)), latent_dim_(latent_dim), limit_(truncation) {}
  int64_t count() const override { return seeds_->count(); }
  void read_range(int64_t first, int64_t count, float* dst) override {
    check_range(first, count);
    const int threads_used = std::min(threads(), static_cast<int>(std::max<int64_t>(1, count / 64)));
    parallel_for(count, threads_used, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        seed_latent(seeds_->seed_at(first + i), latent_dim_, dst + i * latent_dim_, limit_);
    });
  }
  bool drawn() const override { return true; }
  LatentRecipe recipe(int64_t first, int64_t count, uint64_t* seeds) const override {
    check_range(first, count);
    for (int64_t i = 0; i < count; ++i) seeds[i] = seeds_->seed_at(first + i);
    return LatentRecipe{0, 0, seeds, truncation_of(limit_)};
  }
  void finish() override {}
  // The summary states the count beside this.
  std::string describe() const override {
    return "N(0, 1) latents of " + seeds_->describe(false) + truncated_text(limit_);
  }

 private:
  std::shared_ptr<const SeedList> seeds_;
  int latent_dim_;  // nz
  double limit_;    // --truncation T, 0: none
};

class InterpolationLatents : public RangeLatentSource {
 public:
  InterpolationLatents(int64_t side, uint64_t seed, int latent_dim, double truncation)
      : side_(side), seed_(seed), latent_dim_(latent_dim), limit_(truncation), truncation_(truncation_of(truncation)) {}
  int64_t count() const override { return side_ * side_; }
  // Each row's arc is made once per read, then its images from it.
  void read_range(int64_t first, int64_t count, float* dst) override {
    check_range(first, count);
    for (int64_t i = 0; i < count;) {
      const int64_t row = (first + i) / side_;
      const Arc arc(*this, row);
      for (; i < count && (first + i) / side_ == row; ++i) {
        const int64_t step = (first + i) % side_;
        const double t = side_ > 1 ? static_cast<double>(step) / static_cast<double>(side_ - 1) : 0.0;
        arc.point(t, dst + i * latent_dim_);
      }
    }
  }
  void finish() override {}
  std::string describe() const override {
    return std::to_string(side_) + " interpolations of " + std::to_string(side_) + " steps, seed " +
           std::to_string(seed_) + truncated_text(limit_);
  }

 private:
  // Row r's great circle from random latent 2r (a) to 2r + 1 (b), both (nz), and the angle w between them.
  class Arc {
   public:
    Arc(const InterpolationLatents& grid, int64_t row) : a_(static_cast<size_t>(grid.latent_dim_)), b_(a_.size()) {
      double dot = 0, na = 0, nb = 0;
      for (int v = 0; v < grid.latent_dim_; ++v) {
        a_[v] = drawn_latent_value(grid.seed_, 2 * row, v, grid.truncation_);
        b_[v] = drawn_latent_value(grid.seed_, 2 * row + 1, v, grid.truncation_);
        dot += a_[v] * b_[v];
        na += a_[v] * a_[v];
        nb += b_[v] * b_[v];
      }
      const double cosine = std::clamp(dot / std::sqrt(na * nb), -1.0, 1.0);
      omega_ = std::acos(cosine);
      sin_omega_ = std::sin(omega_);
    }
    // out (nz) = sin((1-t)w)/sin(w) a + sin(tw)/sin(w) b.
    void point(double t, float* out) const {
      double wa = 1 - t, wb = t;  // nearly parallel: the straight line is the arc
      if (sin_omega_ > 1e-6) {
        wa = std::sin((1 - t) * omega_) / sin_omega_;
        wb = std::sin(t * omega_) / sin_omega_;
      }
      for (size_t v = 0; v < a_.size(); ++v) out[v] = static_cast<float>(wa * a_[v] + wb * b_[v]);
    }

   private:
    std::vector<double> a_, b_;
    double omega_ = 0, sin_omega_ = 0;
  };

  int64_t side_;
  uint64_t seed_;
  int latent_dim_;  // nz
  double limit_;    // --truncation T, 0: none
  Truncation truncation_;
};

}  // namespace

void seed_latent(uint64_t seed, int latent_dim, float* out, double truncation) {
  const LatentRecipe recipe{seed, 0, nullptr, truncation_of(truncation)};
  for (int v = 0; v < latent_dim; ++v) out[v] = recipe_value(recipe, 0, v);
}

LatentRecipe LatentSource::recipe(int64_t, int64_t, uint64_t*) const {
  throw std::logic_error("recipe of " + describe() + ", whose latents are not drawn");
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

std::unique_ptr<LatentSource> make_random_latents(int64_t count, uint64_t seed, int64_t first, int latent_dim,
                                                  double truncation) {
  return std::make_unique<RandomLatents>(count, seed, first, latent_dim, truncation);
}

std::unique_ptr<LatentSource> make_interpolation_latents(int64_t side, uint64_t seed, int latent_dim, double truncation) {
  return std::make_unique<InterpolationLatents>(side, seed, latent_dim, truncation);
}

std::unique_ptr<LatentSource> make_seed_latents(std::shared_ptr<const SeedList> seeds, int latent_dim, double truncation) {
  return std::make_unique<SeedLatents>(std::move(seeds), latent_dim, truncation);
}

ImageSeeds LatentSpec::image_seeds() const {
  if (!seeds) return [](int64_t) { return std::optional<uint64_t>(); };
  return [list = seeds](int64_t image) { return std::optional<uint64_t>(list->seed_at(image)); };
}

std::unique_ptr<LatentSource> open_latents(const LatentSpec& spec) {
  const int latent_dim = spec.latent_dim;
  if (spec.seeds) return make_seed_latents(spec.seeds, latent_dim, spec.truncation);
  if (spec.interpolate_side > 0) return make_interpolation_latents(spec.interpolate_side, spec.seed, latent_dim, spec.truncation);
  if (spec.random_count > 0) return make_random_latents(spec.random_count, spec.seed, 0, latent_dim, spec.truncation);
  return open_latent_file(spec.path, latent_dim);
}

}  // namespace facegen
