// encoded_layout.cpp: each output format's runs as an encoder makes them (formats/encoded_run.hpp),
// planned from the format's own definitions: the png folder's level-0 PNGs (png_encoder.hpp), a tar
// shard's samples (the frames of tar_shard.hpp around each PNG, a shard's end where append_record
// puts it), a mosaic's parts (for_each_mosaic_part, as write_run cuts them).
#include <algorithm>
#include <stdexcept>
#include <string>

#include "formats/output_format.hpp"
#include "formats/tar_shard.hpp"

namespace facegen {
namespace {

constexpr int64_t kMetaAlign = 16;

// A tar sample's record: its PNG member's header as the head, its json member as the tail.
RecordShape tar_record_shape(const PngStoredLayout& png, int64_t max_json_member) {
  return {&png, kTarBlockBytes, kTarBlockBytes, (kTarBlockBytes + max_json_member + kMetaAlign - 1) / kMetaAlign * kMetaAlign};
}

}  // namespace

EncodedKind OutputLayout::encoded_kind() const {
  switch (format_) {
    case OutputFormat::Png:
    case OutputFormat::Tar: return options_.png_level == 0 ? EncodedKind::Records : EncodedKind::None;
    case OutputFormat::Bmp:
    case OutputFormat::MosaicPng: return options_.grid_padding * 4 <= image_width() ? EncodedKind::Parts : EncodedKind::None;
    case OutputFormat::Text:
    case OutputFormat::Npy:
    case OutputFormat::NpyU8: break;
  }
  return EncodedKind::None;
}

EncodedCapacity OutputLayout::encoded_capacity(int64_t images) const {
  const PngStoredLayout& png = png_stored_layout(image_width(), image_height());
  switch (encoded_kind()) {
    case EncodedKind::Records: {
      if (format_ == OutputFormat::Png) return png_records_capacity(images, image_width(), image_height());
      const int64_t max_json = max_json_member_bytes(total_, options_.facts);
      const int64_t shard_ends = (images + per_file_ - 1) / per_file_ + 1;  // shards a run of `images` can end
      return records_capacity(tar_record_shape(png, max_json), images, max_json, shard_ends * kTarEndBytes);
    }
    case EncodedKind::Parts: {
      const int64_t tile_bytes = (image_width() + options_.grid_padding) * 3 * image_height();
      return {images * tile_bytes, images * static_cast<int64_t>(sizeof(MosaicPart))};
    }
    case EncodedKind::None: break;
  }
  throw std::logic_error("output " + describe() + " has no encoded runs");
}

void OutputLayout::plan_encoded_run(int64_t first, int64_t count, const EncodedMemory& memory, EncodedRun& run,
                                    int threads) const {
  if (first < 0 || count < 0 || count > total_ - first) {
    throw std::logic_error("output " + describe() + ": an encoded run of images [" + std::to_string(first) + ", " +
                           std::to_string(first + count) + ") of " + std::to_string(total_));
  }
  switch (encoded_kind()) {
    case EncodedKind::Records:
      if (format_ == OutputFormat::Png) {
        plan_png_records(count, image_width(), image_height(), memory, run);
      } else {
        plan_tar_run(first, count, memory, run, threads);
      }
      return;
    case EncodedKind::Parts: {
      run = EncodedRun{};
      run.kind = EncodedKind::Parts;
      run.count = count;
      run.height = image_height();
      run.width = image_width();
      run.bgr_bottom_up = format_ == OutputFormat::Bmp;
      run.bytes = memory.bytes;
      run.parts = reinterpret_cast<MosaicPart*>(memory.plan);
      for_each_mosaic_part(first, count, [&](const MosaicPart& part) {
        if ((run.part_count + 1) * static_cast<int64_t>(sizeof(MosaicPart)) > memory.plan_capacity) {
          throw std::logic_error("an encoded mosaic run has more parts than its plan's memory holds");
        }
        MosaicPart& placed = run.parts[run.part_count++];
        placed = part;
        placed.at = run.used;
        run.used += part.span * run.height;
      });
      if (run.used > memory.bytes_capacity) throw std::logic_error("an encoded mosaic run is larger than its memory");
      return;
    }
    case EncodedKind::None: break;
  }
  throw std::logic_error("output " + describe() + " has no encoded runs");
}

void OutputLayout::plan_tar_run(int64_t first, int64_t count, const EncodedMemory& memory, EncodedRun& run,
                                int threads) const {
  const PngStoredLayout& png = png_stored_layout(image_width(), image_height());
  const int64_t png_bytes = static_cast<int64_t>(png.bytes.size());
  const RecordShape shape = tar_record_shape(png, max_json_member_bytes(total_, options_.facts));
  if (shape.head_bytes != kTarBlockBytes) throw std::logic_error("tar: a record's head is not one header");
  const TarFrameMaker frames(png_bytes, options_.facts);
  auto frame_of = [&](int64_t i, char* meta) { return frames.make(first + i, meta, shape.meta_stride); };
  auto end_zeros = [&](int64_t i) { return ends_shard(first + i) ? kTarEndBytes : int64_t{0}; };
  plan_records(shape, count, memory, frame_of, end_zeros, threads, run);
}

}  // namespace facegen
