// npy_latents.hpp: a NumPy .npy file of latents as a LatentSource.
//
// Accepted: format version 1.0, 2.0 or 3.0; dtype '<f4' (float32) or '<f8' (float64, rounded to the
// nearest float); shape (N, nz) with N >= 1 (nz: the model's latent size, 100 for the SHPC network);
// C order; exactly N * nz values after the header. Each
// range of images is read with pread at its own offset, so any thread or rank reads its own share.
// Anything else is refused in one sentence naming the file, what was expected and what was found; a
// value that is NaN, infinite or too large for a float is refused with its image and value index.
#pragma once

#include <memory>
#include <string>

#include "common/model_shape.hpp"
#include "latents/input_file.hpp"
#include "latents/latent_source.hpp"

namespace facegen {

// Whether `bytes` (the file's first bytes) start with the .npy magic "\x93NUMPY".
bool has_npy_magic(const std::string& bytes);

// Reads through the file's one descriptor (`file`, or the path opened once); finish() checks that the
// file did not change since it was opened.
std::unique_ptr<LatentSource> open_npy_latents(std::shared_ptr<const InputFile> file, int latent_dim);
std::unique_ptr<LatentSource> open_npy_latents(const std::string& path, int latent_dim = kLatentDim);

}  // namespace facegen
