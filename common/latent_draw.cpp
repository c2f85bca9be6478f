// latent_draw.cpp: the host's drawn latents, the definition (see latent_draw.hpp).
#include "common/latent_draw.hpp"

#include <cmath>
#include <limits>

namespace facegen {
namespace {

// Box-Muller with glibc's log and cos: the definition of every drawn value.
struct HostBoxMuller {
  double operator()(double u1, double u2) const { return std::sqrt(-2.0 * std::log(u1)) * std::cos(kBoxMullerTurn * u2); }
};

}  // namespace

Truncation truncation_to(double limit) {
  if (limit >= std::numeric_limits<float>::max()) return Truncation{true, std::numeric_limits<float>::max()};
  float largest = static_cast<float>(limit);  // rounded to nearest: one step down where that passed T
  if (static_cast<double>(largest) > limit) largest = std::nextafter(largest, 0.0f);
  return Truncation{true, largest};
}

double random_latent_value(uint64_t seed, uint64_t image, uint64_t value) {
  return drawn_latent_value(seed, image, value, Truncation{});
}

double drawn_latent_value(uint64_t seed, uint64_t image, uint64_t value, const Truncation& truncation) {
  HostBoxMuller box_muller;
  return drawn_value(value_key(seed, image, value), truncation, box_muller);
}

float recipe_value(const LatentRecipe& recipe, int64_t image, int value) {
  HostBoxMuller box_muller;
  return recipe_float(recipe, image, value, box_muller);
}

}  // namespace facegen
