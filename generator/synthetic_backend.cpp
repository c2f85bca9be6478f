// synthetic_backend.cpp: --device synthetic, images from a cheap formula of the latents, not the network.
//
// For tests and benchmarks of everything around the network (latent parsing, the output stage, the
// files): it runs at thousands of images per second on one core, so a test can push N far past the
// chunk size and show that memory does not grow. Value i of image n is
// x / (1 + |x|) with x = z[n][i % 100] + (i % 64) / 32 - 1: in (-1, 1), smooth along rows like a
// picture, different per latent. It holds no network.
#include <cmath>
#include <memory>
#include <string>

#include "generator/backend.hpp"
#include "generator/network.hpp"
#include "common/threads.hpp"

namespace facegen {
namespace {

class SyntheticBackend : public Backend {
 public:
  explicit SyntheticBackend(int threads) : threads_(resolve_threads(threads)) {}

  std::string describe() const override { return "synthetic images (not the network), " + std::to_string(threads_) + " threads"; }

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

 private:
  int threads_;
};

}  // namespace

std::unique_ptr<Backend> make_synthetic_backend(const BackendOptions& options) {
  return std::make_unique<SyntheticBackend>(options.threads);
}

}  // namespace facegen
