// piece_plan.cpp: the pieces of a job in the order they are generated (see piece_plan.hpp).
#include "engine/piece_plan.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>

namespace facegen {

PiecePlan::PiecePlan(int64_t total_images, int64_t unit_images, int64_t piece_images, int lanes)
    : PiecePlan(total_images, unit_images, piece_images, lanes, 0, total_images) {}

PiecePlan::PiecePlan(int64_t total_images, int64_t unit_images, int64_t piece_images, int lanes, int64_t first_image,
                     int64_t end_image)
    : total_(std::max<int64_t>(0, total_images)),
      unit_(unit_images > 0 ? unit_images : std::max<int64_t>(1, total_images)),
      piece_(piece_images),
      units_(total_ == 0 ? 0 : (total_ + unit_ - 1) / unit_),
      first_image_(std::clamp<int64_t>(first_image, 0, total_)),
      end_image_(std::clamp<int64_t>(end_image, first_image_, total_)),
      first_unit_(first_image_ / unit_),
      end_unit_(end_image_ == first_image_ ? first_unit_ : (end_image_ - 1) / unit_ + 1),
      next_unit_(first_unit_) {
  if (piece_images < 1 || lanes < 1) throw std::invalid_argument("PiecePlan: bad arguments");
  lanes_.resize(static_cast<size_t>(std::max<int64_t>(1, std::min<int64_t>(lanes, end_unit_ - first_unit_))));
  for (Lane& lane : lanes_) take_unit(lane);
}

PiecePlan::PiecePlan(int64_t total_images, int64_t unit_images, int64_t piece_images, int lanes,
                     std::vector<int64_t> listed_units)
    : PiecePlan(total_images, unit_images, piece_images, lanes, 0, total_images) {
  for (int64_t u : listed_units) {
    if (u < 0 || u >= units_) throw std::invalid_argument("PiecePlan: no unit " + std::to_string(u));
  }
  listed_ = std::move(listed_units);
  listed_plan_ = true;
  next_unit_ = 0;
  lanes_.assign(std::max<size_t>(1, std::min(static_cast<size_t>(lanes), listed_.size())), Lane{});
  for (Lane& lane : lanes_) take_unit(lane);
}

int64_t PiecePlan::images() const {
  if (!listed_plan_) return end_image_ - first_image_;
  int64_t images = 0;
  for (int64_t u : listed_) images += unit(u).count;
  return images;
}

PieceRange PiecePlan::unit(int64_t u) const {
  const int64_t first = std::max(u * unit_, first_image_);
  return {first, std::max<int64_t>(0, std::min(end_image_, (u + 1) * unit_) - first)};
}

bool PiecePlan::take_unit(Lane& lane) {
  const int64_t end = listed_plan_ ? static_cast<int64_t>(listed_.size()) : end_unit_;
  if (next_unit_ >= end) {
    lane = Lane{};
    return false;
  }
  const int64_t taken = next_unit_++;
  const PieceRange u = unit(listed_plan_ ? listed_[static_cast<size_t>(taken)] : taken);
  lane = Lane{u.first, u.first + u.count};
  return true;
}

bool PiecePlan::next(PieceRange& piece) {
  for (size_t tried = 0; tried < lanes_.size(); ++tried) {
    Lane& lane = lanes_[turn_];
    turn_ = (turn_ + 1) % lanes_.size();
    if (lane.next >= lane.end) continue;  // retired: no unit left for it
    piece = {lane.next, std::min(piece_, lane.end - lane.next)};
    lane.next += piece.count;
    if (lane.next >= lane.end) take_unit(lane);
    return true;
  }
  return false;
}

namespace {

// The PNG folder's unit: a group of its files with --resume (whole subfolders: png_group_images is a
// multiple of a subfolder's images), else a subfolder, so that runs of several subfolders are written
// at once and processes that split the job never share one; 0 (one unit) for a flat folder.
int64_t png_folder_unit(const OutputOptions& options) {
  if (options.png_group_images > 0) return options.png_group_images;
  return options.png_layout == PngLayout::Subfolders ? kPngSubfolderImages : 0;
}

}  // namespace

int64_t unit_images_for(const std::vector<OutputFormat>& formats, const OutputOptions& options, int64_t total_images) {
  for (OutputFormat format : formats) {
    if (format == OutputFormat::Tar) return options.shard_images > 0 ? options.shard_images : kDefaultShardImages;
    if (is_sharded_format(format) && options.shard_images > 0) return options.shard_images;
  }
  for (OutputFormat format : formats) {
    if (format != OutputFormat::Bmp && format != OutputFormat::MosaicPng) continue;
    if (mosaic_file_count(total_images, options.mosaic_tiles) > 1) return int64_t{options.mosaic_tiles} * options.mosaic_tiles;
  }
  if (std::find(formats.begin(), formats.end(), OutputFormat::Png) != formats.end()) return png_folder_unit(options);
  return 0;
}

int64_t split_unit_images(const std::vector<OutputFormat>& formats, const OutputOptions& options, int64_t total_images) {
  const int64_t whole = std::max<int64_t>(1, total_images);
  int64_t unit = 1;
  for (OutputFormat format : formats) {
    int64_t file = whole;  // one file: every image
    if (format == OutputFormat::Png) {
      file = std::max<int64_t>(1, png_folder_unit(options));
    } else if (format == OutputFormat::Tar) {
      file = options.shard_images > 0 ? options.shard_images : kDefaultShardImages;
    } else if (is_sharded_format(format) && options.shard_images > 0) {
      file = options.shard_images;
    } else if ((format == OutputFormat::Bmp || format == OutputFormat::MosaicPng) &&
               mosaic_file_count(total_images, options.mosaic_tiles) > 1) {
      file = int64_t{options.mosaic_tiles} * options.mosaic_tiles;
    }
    // unit = lcm(unit, file), stopping at N.
    const int64_t common = unit / std::gcd(unit, file);
    if (common > whole / file) return whole;
    unit = common * file;
  }
  return std::min(unit, whole);
}

bool needs_image_order(const std::vector<OutputFormat>& formats, bool random_access_latents) {
  return !random_access_latents || std::find(formats.begin(), formats.end(), OutputFormat::Text) != formats.end();
}

}  // namespace facegen

namespace facegen {

JobFlow job_flow(const std::vector<OutputFormat>& formats, const OutputOptions& options, int64_t total_images,
                 int threads, int64_t bytes_per_image, int64_t piece_images, bool ordered) {
  JobFlow flow;
  flow.unit_images = unit_images_for(formats, options, total_images);
  const int64_t unit = flow.unit_images > 0 ? flow.unit_images : std::max<int64_t>(1, total_images);
  const int64_t units = total_images > 0 ? (total_images + unit - 1) / unit : 1;
  flow.piece_images = piece_images > 0 ? piece_images : std::max<int64_t>(1, kDefaultPieceBytes / bytes_per_image);
  flow.piece_images = std::max<int64_t>(1, std::min({flow.piece_images, unit, std::max<int64_t>(1, total_images)}));
  // Half the threads' worth of files at once: each has a thread writing while another makes its
  // next records.
  flow.lanes = ordered ? 1 : static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads / 2, units)));
  const int64_t piece_bytes = flow.piece_images * bytes_per_image;
  const int64_t affordable = std::max<int64_t>(4, kMaxInFlightBytes / std::max<int64_t>(1, piece_bytes));
  flow.buffers = static_cast<int>(std::max<int64_t>(4, std::min<int64_t>(2 * flow.lanes + 2, affordable)));
  return flow;
}

}  // namespace facegen
