// memory_output.hpp: an output format's files made in memory instead of on disk, from the same
// definitions (output_format.hpp) that the batch tool's drivers write: the bytes of each file are the
// bytes the batch tool would put in it. For the HTTP service, which answers with them.
//
// Images are (count, S, S, nc) floats, C fastest, values in (-1, 1), as OutputLayout takes them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/output_format.hpp"

namespace facegen {

// The final files of `layout` for its total_images() images, in the layout's order: npy, npy-u8 and
// tar their shards; mosaic-png its PNGs (the scratch pixels left out); png one PNG per image (the
// folder's files in name order). txt and bmp too. `threads`: encoder threads (<= 0: every CPU).
std::vector<std::string> encode_in_memory(const OutputLayout& layout, const float* images, int threads = 1);

}  // namespace facegen
