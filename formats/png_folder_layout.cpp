// png_folder_layout.cpp: the paths of a folder of PNGs' files (see png_folder_layout.hpp).
#include "formats/png_folder_layout.hpp"

#include <cstdio>

#include "common/errors.hpp"
#include "formats/output_format.hpp"

namespace facegen {

PngLayout parse_png_layout(const std::string& name, const std::string& flag) {
  if (name == "flat") return PngLayout::Flat;
  if (name == "subfolders") return PngLayout::Subfolders;
  throw UserError(flag + " expects flat or subfolders, got '" + name + "'");
}

const char* png_layout_name(PngLayout layout) { return layout == PngLayout::Flat ? "flat" : "subfolders"; }

std::string png_subfolder_name(int64_t index, int64_t total_images, PngLayout layout) {
  if (layout == PngLayout::Flat) return "";
  const int digits = static_cast<int>(png_file_name(index, total_images).size()) - 4 - 3;  // less ".png", 3 digits
  char name[32];
  std::snprintf(name, sizeof name, "%0*lld", digits, static_cast<long long>(index / kPngSubfolderImages));
  return name;
}

std::string png_relative_path(int64_t index, int64_t total_images, PngLayout layout) {
  if (layout == PngLayout::Flat) return png_file_name(index, total_images);
  return png_subfolder_name(index, total_images, layout) + "/" + png_file_name(index, total_images);
}

int64_t png_subfolder_images(PngLayout layout, int64_t total_images) {
  return layout == PngLayout::Flat ? total_images : kPngSubfolderImages;
}

bool is_png_subfolder_name(const std::string& name) {
  if (name.size() < 3) return false;
  for (char c : name)
    if (c < '0' || c > '9') return false;
  return true;
}

}  // namespace facegen
