// text_latents.hpp: a latent text file as a LatentSource, read in order or by image ranges.
//
// A regular file is read by ranges: the coarse token map (latent_index.hpp) gives the byte, line and
// column of the first number of any image, and threads each resume a LatentReader there on their own
// images, so messages and positions are those of one reader going through the file. Of several
// errors, the first in file order is reported. A pipe or other stream is read in order by one reader.
#pragma once

#include <memory>
#include <string>

#include "common/model_shape.hpp"
#include "latents/input_file.hpp"
#include "latents/latent_source.hpp"

namespace facegen {

// Each image has `latent_dim` (nz) values. Every reader reads the file's one descriptor (`file`, or
// the path opened once).
std::unique_ptr<LatentSource> open_text_latents(std::shared_ptr<const InputFile> file, int latent_dim);
std::unique_ptr<LatentSource> open_text_latents(const std::string& path, int latent_dim = kLatentDim);

}  // namespace facegen
