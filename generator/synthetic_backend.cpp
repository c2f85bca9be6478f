// synthetic_backend.cpp: --device synthetic, images from a cheap formula of the latents, not the network.
//
// For tests and benchmarks of everything around the network (latent parsing, the output stage, the
// files, the service's HTTP path): it costs a few microseconds an image on one core, so a test can
// push N far past the chunk size and show that memory does not grow, and a benchmark can find the
// ceiling of what surrounds the network. Value i of image n is x / (1 + |x|) with
// x = z[n][i % 100] + (i % 64) / 32 - 1: in (-1, 1), smooth along rows like a picture, different per
// latent. It depends on i only through i % 100 and i % 64, so through i % 1600: an image is its first
// 1,600 values repeated, which are all that is computed (and scanned, and converted to 8-bit) for it;
// the rest are copies. It holds no network.
//
// FACEGEN_SYNTHETIC_RECIPES=1 makes it take drawn latents as recipes, as the CUDA backend does
// (Backend::draws_latents), and draw them itself on the host (recipe_value): the engine's path of
// recipes, every driver's included (MPI ranks), runs without a GPU and gives the same bytes.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/threads.hpp"
#include "formats/output_format.hpp"
#include "generator/backend.hpp"
#include "generator/finite_check.hpp"
#include "generator/network.hpp"

namespace facegen {
namespace {

constexpr int kPeriod = 1600;  // lcm(100, 64): the values an image repeats
static_assert(kLatentDim == 100 && kImageValues >= kPeriod, "the period of the formula");

// (i % 64) / 32 - 1 for i in [0, kPeriod): the formula's column term, made once.
struct ColumnTerms {
  float value[kPeriod];
  ColumnTerms() {
    for (int i = 0; i < kPeriod; ++i) value[i] = static_cast<float>(i % 64) / 32.0f - 1.0f;
  }
};

// The first kPeriod values of the image of latent z (kLatentDim): the formula itself, with z laid out
// 16 times over the period so that the loop is a straight one the compiler vectorises (the same
// operations on the same floats as value by value).
void period_values(const float* z, float* out) {
  static const ColumnTerms columns;
  float repeated[kPeriod];  // z[i % kLatentDim]
  for (int at = 0; at < kPeriod; at += kLatentDim) std::memcpy(repeated + at, z, kLatentDim * sizeof(float));
  for (int i = 0; i < kPeriod; ++i) {
    const float x = repeated[i] + columns.value[i];
    out[i] = x / (1.0f + std::fabs(x));
  }
}

// out[from, values) = period[i % kPeriod], one copy per period (from: 0, or kPeriod where out's own
// first period is `period`).
template <class T>
void repeat_period(const T* period, T* out, int values, int from = 0) {
  for (int at = from; at < values; at += kPeriod) {
    std::memcpy(out + at, period, static_cast<size_t>(std::min(kPeriod, values - at)) * sizeof(T));
  }
}

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
        float* out = images + image * kImageValues;  // (64, 64, 3)
        period_values(latents + image * kLatentDim, out);
        repeat_period(out, out, kImageValues, kPeriod);
      }
    });
  }

  // The scan and the 8-bit pixels from the period alone: every value of an image is one of its
  // period's, and each of those appears in it, so the period's scan is the image's. Encoded runs
  // (FACEGEN_TEST_HOST_ENCODERS) are the base's: these pixels, then the encoders' CPU model.
  void generate_checked(const float* latents, int64_t n, const ImageTarget& out, int threads) override {
    if (out.encoded) return Backend::generate_checked(latents, n, out, threads);
    if (out.channels != 3) throw std::logic_error("synthetic images have 3 channels");
    parallel_for(n, threads_, [&](int64_t begin, int64_t end) {
      float period[kPeriod];
      unsigned char bytes[kPeriod];
      for (int64_t image = begin; image < end; ++image) {
        period_values(latents + image * kLatentDim, period);
        out.flags[image] = scan_image(period, kPeriod);
        if (out.encoding == ImageEncoding::Float32) {
          repeat_period(period, static_cast<float*>(out.images) + image * kImageValues, kImageValues);
        } else {
          for (int i = 0; i < kPeriod; ++i) bytes[i] = channel_to_byte(period[i]);
          repeat_period(bytes, static_cast<unsigned char*>(out.images) + image * kRgb8ImageBytes, static_cast<int>(kRgb8ImageBytes));
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
