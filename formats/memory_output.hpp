// memory_output.hpp: an output format's files made in memory instead of on disk, from the same
// definitions (output_format.hpp) that the batch tool's drivers write: the bytes of each file are the
// bytes the batch tool would put in it. For the HTTP service, which answers with them.
//
// Images are (count, S, S, nc) floats, C fastest, values in (-1, 1), as OutputLayout takes them, or
// their 8-bit RGB pixels (count, S, S, 3) for the 8-bit formats (formats/image_run.hpp): the same bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/image_run.hpp"
#include "formats/output_format.hpp"

namespace facegen {

// The final files of `layout` for its total_images() images, in the layout's order: npy, npy-u8 and
// tar their shards; mosaic-png its PNGs (the scratch pixels left out); png one PNG per image (the
// folder's files in name order). txt and bmp too. `threads`: encoder threads (<= 0: every CPU).
// `images`: a run of all the layout's images as the writers take it: values, 8-bit pixels, or the run
// already encoded (formats/encoded_run.hpp; planned by layout.plan_encoded_run(0, N, ...)).
std::vector<std::string> encode_in_memory(const OutputLayout& layout, const ImageRun& images, int threads = 1);
inline std::vector<std::string> encode_in_memory(const OutputLayout& layout, const float* images, int threads = 1) {
  return encode_in_memory(layout, ImageRun::floats(images, layout.image_channels(), layout.image_size()), threads);
}

}  // namespace facegen
