// latent_draw.hpp: the drawn latents, defined once for the host and the GPU. Value v of image n of
// seed S's sequence is a pure function of (S, n, v): N(0, 1), or N(0, 1) truncated to [-T, T]
// (--truncation T). LatentRecipe describes a job's drawn latents to a backend that makes them itself.
//
// The stream of one value: key = mix64(mix64(mix64(S) ^ n) ^ v) (mix64: the splitmix64 output
// function), words w_j = mix64(key ^ j) for j = 1, 2, ... Draw k (0, 1, ...) is Box-Muller on the words
// 2k+1 and 2k+2: u1 = 1 - (w_{2k+1} >> 11) 2^-53 in (0, 1], u2 = (w_{2k+2} >> 11) 2^-53 in [0, 1),
// z_k = sqrt(-2 log u1) cos(6.283185307179586 u2) in double, with glibc's log and cos; the latent value is
// float(z_k). Untruncated, a value is draw 0. Truncated to T, it is the first of draws 0 ..
// kTruncationDraws - 1 whose float lies in [-T, T]; where none does, L (2u - 1), L the largest float
// <= T and u the unit value (>> 11, 2^-53) of word 2 kTruncationDraws + 1: uniform on [-L, L], which is
// close to the truncated normal where such a miss is not rare (T small: T = 0.3 misses once in 5,500
// values, T = 0.1 once in 14; T = 0.5 once in 5 million, T = 1 once in 10^16). Every draw has |z| <=
// 8.5717 (u1 >= 2^-53), so any T from 8.58 up gives the untruncated values exactly.
//
// The GPU computes z with CUDA's log and cos, which may differ from glibc's in the last bits; the
// float of z is the same wherever z lies farther than kDrawAgreement |z| from every float rounding
// edge (near_float_rounding_edge); the GPU hands the others to the host (docs/gpu.md, "Latents on the GPU").
#pragma once

#include <math.h>

#include <cstdint>

#if defined(__CUDACC__)
#define FACEGEN_HOST_DEVICE __host__ __device__
#else
#define FACEGEN_HOST_DEVICE
#endif

namespace facegen {

constexpr int kTruncationDraws = 32;           // draws a truncated value tries before its uniform fallback
constexpr double kLargestDraw = 8.5717;        // above every |z|: sqrt(-2 log 2^-53) = 8.57167...
constexpr double kBoxMullerTurn = 6.283185307179586;  // 2 pi in double, the cosine's factor

// How far the GPU's z may lie from the host's, relative to |z|, for the detector (2^-40). Needed:
// 12 * 2^-53 from the documented errors (CUDA: log 1 ulp, cos 2 ulp, sqrt and products correctly
// rounded; glibc on x86-64: log and cos 1 ulp); 2^-40 leaves a factor of 680 for error bounds that
// both libraries state from tests, not proofs. It sends about one draw in 50,000 to the host.
constexpr double kDrawAgreement = 0x1.0p-40;

// --truncation: a float value f lies in [-T, T] exactly when |f| <= limit, the largest float <= T.
struct Truncation {
  bool active = false;
  float limit = 0;
};

// The recipe of a job of n drawn latents, for a backend that makes them itself (Backend::draws_latents).
// Image i (0 .. n-1) of the job is image first_image + i of seed's sequence, or, where seeds is set,
// image 0 of seed seeds[i] (--seeds: each image the latent of its own seed).
struct LatentRecipe {
  uint64_t seed = 0;
  int64_t first_image = 0;
  const uint64_t* seeds = nullptr;  // (n), or null
  Truncation truncation;
};

// The splitmix64 output function (Steele, Lea, Flood 2014): a well-mixed 64-bit hash of a counter.
FACEGEN_HOST_DEVICE inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The top 53 bits of a word as a double in [0, 1), exactly.
FACEGEN_HOST_DEVICE inline double unit_interval(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

FACEGEN_HOST_DEVICE inline uint64_t value_key(uint64_t seed, uint64_t image, uint64_t value) {
  return mix64(mix64(mix64(seed) ^ image) ^ value);
}
FACEGEN_HOST_DEVICE inline uint64_t value_word(uint64_t key, uint64_t j) { return mix64(key ^ j); }

FACEGEN_HOST_DEVICE inline uint64_t recipe_key(const LatentRecipe& recipe, int64_t image, int value) {
  return recipe.seeds != nullptr ? value_key(recipe.seeds[image], 0, static_cast<uint64_t>(value))
                                 : value_key(recipe.seed, static_cast<uint64_t>(recipe.first_image + image),
                                             static_cast<uint64_t>(value));
}

// The value of the stream `key` as a double (its float is the latent value). box_muller(u1, u2)
// computes sqrt(-2 log u1) cos(kBoxMullerTurn u2): glibc's on the host (the definition), CUDA's on the
// GPU (kernels/latent_draw.cuh). Everything else here is exact, the same on both.
template <class BoxMuller>
FACEGEN_HOST_DEVICE double drawn_value(uint64_t key, const Truncation& truncation, BoxMuller& box_muller) {
  const int draws = truncation.active ? kTruncationDraws : 1;
  for (int k = 0; k < draws; ++k) {
    const double u1 = 1.0 - unit_interval(value_word(key, 2 * k + 1));
    const double z = box_muller(u1, unit_interval(value_word(key, 2 * k + 2)));
    const float f = static_cast<float>(z);
    if (!truncation.active || (f < 0 ? -f : f) <= truncation.limit) return z;
  }
  const double u = unit_interval(value_word(key, 2 * kTruncationDraws + 1));
  return static_cast<double>(truncation.limit) * (2.0 * u - 1.0);  // |.| <= limit, and so is its float
}

// Whether z lies within kDrawAgreement |z| (or `agreement` |z|) of an edge between two floats' rounding
// intervals, or on one: another z' that close may round to another float. The edges are the
// midpoints between float(z) and its neighbours, exact in double.
FACEGEN_HOST_DEVICE inline bool near_float_rounding_edge(double z, double agreement = kDrawAgreement) {
  const float f = static_cast<float>(z);
  const double up = (static_cast<double>(f) + static_cast<double>(nextafterf(f, HUGE_VALF))) * 0.5;
  const double down = (static_cast<double>(f) + static_cast<double>(nextafterf(f, -HUGE_VALF))) * 0.5;
  const double margin = agreement * (z < 0 ? -z : z);
  return up - z <= margin || z - down <= margin;
}

// Whether a draw whose z was computed with other log and cos than glibc's (the GPU's) might have another
// float than the host's: z near a float rounding edge, or u1 = 1 (z = +-0, whose sign rests on log(1)
// being +0 exactly).
FACEGEN_HOST_DEVICE inline bool draw_uncertain(double u1, double z, double agreement = kDrawAgreement) {
  return u1 == 1.0 || near_float_rounding_edge(z, agreement);
}

// Value `value` of job image `image` of a recipe, with box_muller's log and cos: what the host's
// recipe_value and the GPU's kernel both make.
template <class BoxMuller>
FACEGEN_HOST_DEVICE float recipe_float(const LatentRecipe& recipe, int64_t image, int value, BoxMuller& box_muller) {
  return static_cast<float>(drawn_value(recipe_key(recipe, image, value), recipe.truncation, box_muller));
}

// The truncation of --truncation T (T > 0 and finite; the caller checks).
Truncation truncation_to(double limit);

// Value `value` of random latent `image` for `seed`, untruncated: draw 0 of its stream (glibc).
double random_latent_value(uint64_t seed, uint64_t image, uint64_t value);
// The same, truncated as `truncation` says: the double whose float is the latent value (interpolations
// take the double).
double drawn_latent_value(uint64_t seed, uint64_t image, uint64_t value, const Truncation& truncation);
// Value `value` of job image `image` of a recipe, as the host makes it: the reference of the GPU's.
float recipe_value(const LatentRecipe& recipe, int64_t image, int value);

}  // namespace facegen
