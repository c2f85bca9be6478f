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
  const int digits = png_index_digits(total_images) - 3;
  char name[32];
  std::snprintf(name, sizeof name, "%0*lld", digits, static_cast<long long>(index / kPngSubfolderImages));
  return name;
}

std::string png_relative_path(int64_t index, int64_t total_images, PngLayout layout, const SampleFacts& facts) {
  if (layout == PngLayout::Flat) return png_file_name(index, total_images, facts);
  return png_subfolder_name(index, total_images, layout) + "/" + png_file_name(index, total_images, facts);
}

size_t png_longest_relative_path(int64_t total_images, PngLayout layout, const SampleFacts& facts) {
  // Every index name of a run has the same length, and so has every subfolder's name.
  const size_t file = facts.named_by_seed ? kLongestSeedPngName : static_cast<size_t>(png_index_digits(total_images)) + 4;
  return layout == PngLayout::Flat ? file : png_subfolder_name(0, total_images, layout).size() + 1 + file;
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
