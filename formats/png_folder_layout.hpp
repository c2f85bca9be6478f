// png_folder_layout.hpp: where each image's file lies inside a folder of PNGs (--formats png). Pure
// naming, unit-tested alone.
//
//   flat        PREFIX/000000.png, PREFIX/000001.png, ...   (the default)
//   subfolders  PREFIX/000/000000.png ... PREFIX/000/000999.png, PREFIX/001/001000.png, ...
//
// A file is named by its image's index, six digits or more (png_file_name). In subfolders, image i lies
// in the subfolder of i / kPngSubfolderImages, named with that number in as many digits as the file
// names have beyond three: the subfolder's name is its files' names without their last three digits
// and ".png". Each subfolder holds a thousand files (the last fewer), so that writers of different
// subfolders never wait for one directory's lock, as every creation in one folder does.
#pragma once

#include <cstdint>
#include <string>

namespace facegen {

enum class PngLayout { Flat, Subfolders };

constexpr int64_t kPngSubfolderImages = 1000;

// "flat" or "subfolders"; throws UserError naming `flag` and the expected values.
PngLayout parse_png_layout(const std::string& name, const std::string& flag);
const char* png_layout_name(PngLayout layout);

// The subfolder that image `index` of `total_images` lies in ("000", "012", "1234" for seven-digit
// names); "" in the flat layout.
std::string png_subfolder_name(int64_t index, int64_t total_images, PngLayout layout);
// Its path inside the folder: "000042.png", or "000/000042.png".
std::string png_relative_path(int64_t index, int64_t total_images, PngLayout layout);
// The images of one subfolder: its whole unit of files (the flat folder: all of them, one unit).
int64_t png_subfolder_images(PngLayout layout, int64_t total_images);

// Whether `name` can be a subfolder of the subfolders layout: three digits or more, nothing else.
bool is_png_subfolder_name(const std::string& name);

}  // namespace facegen
