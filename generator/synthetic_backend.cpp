// synthetic_backend.cpp: --device synthetic, images from a cheap formula of the latents, not the network.
//
// For tests and benchmarks of everything around the network (latent parsing, the output stage, the
// files): it runs at thousands of images per second on one core, so a test can push N far past the
// chunk size and show that memory does not grow. Value i of image n is
// x / (1 + |x|) with x = z[n][i % 100] + (i % 64) / 32 - 1: in (-1, 1), smooth along rows like a
// picture, different per latent. It holds no network.
//
// FACEGEN_SYNTHETIC_RECIPES=1 makes it take drawn latents as recipes, as the CUDA backend does
// (Backend::draws_latents), and draw them itself on the host (recipe_value): the engine's path of
// recipes, every driver's included (MPI ranks), runs without a GPU and gives the same bytes.
#include <cmath>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "generator/backend.hpp"
#include "generator/network.hpp"
#include "common/threads.hpp"

namespace facegen {
namespace {

class SyntheticBackend : public Backend {
 public:
  explicit SyntheticBackend(int threads) : threads_(resolve_threads(threads)), draws_latents_(takes_recipes()) {}

  std::string describe() const override {
    return "synthetic images (not the network), " + std::to_string(threads_) + " threads" +
           (draws_latents_ ? ", drawing latents from recipes" : "");
  }

  void generate(const float* latents, int64_t n, float* images) override {
    parallel_for(n, threads_, [&](int64_t begin, int64_t end) {
      for (int64_t image = begin; image < end; ++image) {
        const float* z = latents + image * kLatentDim;   // (100)
        float* out = images + image * kImageValues;     // (64, 64, 3)
        for (int i = 0; i < kImageValues; ++i) {
          const float x = z[i % kLatentDim] + static_cast<float>(i % 64) / 32.0f - 1.0f;
          out[i] = x / (1.0f + std::fabs(x));
        }
      }
    });
  }

  bool draws_latents() const override { return draws_latents_; }

  void generate_stream(const NextJob& next, const JobDone& done, int threads) override {
    StreamJob job;
    std::vector<float> drawn;  // (n, 100): a recipe's latents
    while (next(job)) {
      const float* latents = job.latents;
      if (job.recipe != nullptr) {
        if (!draws_latents_) throw std::logic_error("SyntheticBackend: a recipe where latents were not to be drawn");
        drawn.resize(static_cast<size_t>(job.n) * kLatentDim);
        parallel_for(job.n, threads_, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i)
            for (int v = 0; v < kLatentDim; ++v) drawn[i * kLatentDim + v] = recipe_value(*job.recipe, i, v);
        });
        latents = drawn.data();
      }
      generate_checked(latents, job.n, job.out, threads);
      done(job);
    }
  }

 private:
  // FACEGEN_SYNTHETIC_RECIPES: 1 takes recipes; unset or 0 does not.
  static bool takes_recipes() {
    const char* value = std::getenv("FACEGEN_SYNTHETIC_RECIPES");
    if (value == nullptr || std::string(value) == "0") return false;
    if (std::string(value) == "1") return true;
    throw std::invalid_argument(std::string("FACEGEN_SYNTHETIC_RECIPES must be 0 or 1, not '") + value + "'");
  }

  int threads_;
  bool draws_latents_;
};

}  // namespace

std::unique_ptr<Backend> make_synthetic_backend(const BackendOptions& options) {
  return std::make_unique<SyntheticBackend>(options.threads);
}

}  // namespace facegen
