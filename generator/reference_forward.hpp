// reference_forward.hpp: the whole generator through the CPU reference layers, for any ModelSpec.
//
// latents (n, nz) -> projection -> (n, 4, 4, C0) -> [batch norm + ReLU -> tconv] x S -> tanh ->
// images (n, size, size, nc), C fastest (S, size: the spec's stages() and image_size) (generator/network.hpp has the formulas). The CPU backend runs
// models its fast kernels do not take through this, and the finite check traces one latent with it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "generator/network.hpp"

namespace facegen {

// Told each layer's output after it is computed: its name ("proj", "bn0", "tconv1", ..., "tanh") and
// its values (n, h, w, c); returning false stops the pass there (images are then not written).
using LayerObserver = std::function<bool(const std::string& layer, const std::vector<float>& values)>;

// Returns false when the observer stopped the pass. threads <= 0: every hardware thread.
bool reference_forward(const Network& net, const float* latents, int64_t n, float* images, int threads,
                       const LayerObserver& observer = nullptr);

}  // namespace facegen
