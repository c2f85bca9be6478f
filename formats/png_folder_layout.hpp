// png_folder_layout.hpp: where each image's file lies inside a folder of PNGs (--formats png). Pure
// naming, unit-tested alone.
//
//   flat        PREFIX/000000.png, PREFIX/000001.png, ...   (the default)
//   subfolders  PREFIX/000/000000.png ... PREFIX/000/000999.png, PREFIX/001/001000.png, ...
//
// A file is named by its image's index, six digits or more, or by its seed where the run names images
// by seed (png_file_name: "000042.png", "seed0042.png"). In subfolders, image i lies in the subfolder
// of i / kPngSubfolderImages, whatever its file's name, named with that number in as many digits as the
// index names have beyond three: the subfolder's name is its index names without their last three
// digits and ".png". Each subfolder holds a thousand files (the last fewer), so that writers of
// different subfolders never wait for one directory's lock, as every creation in one folder does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace facegen {

struct SampleFacts;  // formats/output_format.hpp: how the run names its images

enum class PngLayout { Flat, Subfolders };

constexpr int64_t kPngSubfolderImages = 1000;

// "flat" or "subfolders"; throws UserError naming `flag` and the expected values.
PngLayout parse_png_layout(const std::string& name, const std::string& flag);
const char* png_layout_name(PngLayout layout);

// The subfolder that image `index` of `total_images` lies in ("000", "012", "1234" for seven-digit
// names); "" in the flat layout.
std::string png_subfolder_name(int64_t index, int64_t total_images, PngLayout layout);
// Its path inside the folder: "000042.png", "000/000042.png", or by seed "seed0042.png",
// "000/seed0042.png". The one place a folder's file is named.
std::string png_relative_path(int64_t index, int64_t total_images, PngLayout layout, const SampleFacts& facts);
// The longest path any of the folder's files may have inside it, whatever the seeds (kLongestSeedPngName).
size_t png_longest_relative_path(int64_t total_images, PngLayout layout, const SampleFacts& facts);
// The images of one subfolder: its whole unit of files (the flat folder: all of them, one unit).
int64_t png_subfolder_images(PngLayout layout, int64_t total_images);

// Whether `name` can be a subfolder of the subfolders layout: three digits or more, nothing else.
bool is_png_subfolder_name(const std::string& name);

}  // namespace facegen
