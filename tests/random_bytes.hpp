// random_bytes.hpp: fresh random bytes for a test's input (pixels, file contents), the same for the
// same seed: std::mt19937_64's low byte of each draw.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>

namespace facegen_test {

// `n` bytes into a Bytes (std::string, std::vector<unsigned char>) from `seed`.
template <class Bytes>
Bytes random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 random(seed);
  Bytes bytes(n, 0);
  for (auto& b : bytes) b = static_cast<typename Bytes::value_type>(random());
  return bytes;
}

}  // namespace facegen_test
