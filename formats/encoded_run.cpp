// encoded_run.cpp: the plans of runs of records, and the CPU model of the encoders (see
// encoded_run.hpp). The model fills in a record the way a reader of the PNG specification would
// check it: the template copied, the pixels put where PngStoredLayout says, the Adler-32 and the
// CRC-32 computed over the bytes as they lie (libdeflate's, as PngEncoder's); the GPU's kernels
// compute the same checksums by combining the parts of many threads.
#include "formats/encoded_run.hpp"

#include <libdeflate.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "common/threads.hpp"

namespace facegen {
namespace {

constexpr int64_t kPlanAlign = 16;
int64_t aligned(int64_t bytes, int64_t to) { return (bytes + to - 1) / to * to; }

// Arrays carved one after another from a plan's memory, each 16-byte aligned.
class PlanCarver {
 public:
  explicit PlanCarver(const EncodedMemory& memory) : at_(memory.plan), left_(memory.plan_capacity) {}
  template <class T>
  T* take(int64_t count) {
    const int64_t bytes = aligned(count * static_cast<int64_t>(sizeof(T)), kPlanAlign);
    if (bytes > left_) throw std::logic_error("an encoded run's plan is larger than its memory");
    T* taken = reinterpret_cast<T*>(at_);
    at_ += bytes;
    left_ -= bytes;
    return taken;
  }

 private:
  unsigned char* at_;
  int64_t left_;
};

int64_t records_plan_bytes(int64_t images, int64_t meta_stride) {
  return aligned((images + 1) * 8, kPlanAlign) + aligned(images * 4, kPlanAlign) +
         aligned(images * meta_stride, kPlanAlign);
}

void put_be32(unsigned char* at, uint32_t v) {
  at[0] = static_cast<unsigned char>(v >> 24);
  at[1] = static_cast<unsigned char>(v >> 16);
  at[2] = static_cast<unsigned char>(v >> 8);
  at[3] = static_cast<unsigned char>(v);
}

// Image i's record of a run of records from its pixels (height, width, 3).
void fill_record(const EncodedRun& run, int64_t i, const unsigned char* rgb) {
  const PngStoredLayout& png = *run.png;
  const int64_t png_bytes = static_cast<int64_t>(png.bytes.size());
  unsigned char* record = run.bytes + run.record_at[i];
  const char* meta = run.meta + i * run.meta_stride;
  std::memset(record, 0, static_cast<size_t>(run.record_at[i + 1] - run.record_at[i]));
  std::memcpy(record, meta, static_cast<size_t>(run.head_bytes));
  unsigned char* file = record + run.head_bytes;
  std::memcpy(file, png.bytes.data(), static_cast<size_t>(png_bytes));
  const int64_t pixel_row = 3 * png.width;
  for (int64_t y = 0; y < png.height; ++y) {
    for (int64_t x = 0; x < pixel_row; ++x) file[png.raw_at(y * png.row_bytes() + 1 + x)] = rgb[y * pixel_row + x];
  }
  uint32_t adler = 1;
  for (int64_t r = 0; r < png.raw_bytes; r += png.block_bytes) {
    adler = libdeflate_adler32(adler, file + png.raw_at(r), static_cast<size_t>(std::min(png.block_bytes, png.raw_bytes - r)));
  }
  put_be32(file + png.adler_at, adler);
  put_be32(file + png.crc_at, libdeflate_crc32(0, file + png.crc_from, static_cast<size_t>(png.crc_at - png.crc_from)));
  std::memcpy(file + aligned(png_bytes, run.align), meta + run.head_bytes, static_cast<size_t>(run.tail_bytes[i]));
}

}  // namespace

EncodedCapacity records_capacity(const RecordShape& shape, int64_t images, int64_t max_tail, int64_t end_bytes) {
  const int64_t record = shape.head_bytes + aligned(static_cast<int64_t>(shape.png->bytes.size()), shape.align) +
                         aligned(max_tail, shape.align);
  return {images * record + end_bytes, records_plan_bytes(images, shape.meta_stride)};
}

void plan_records(const RecordShape& shape, int64_t count, const EncodedMemory& memory, const RecordMeta& fill_meta,
                  const std::function<int64_t(int64_t i)>& end_zeros, int threads, EncodedRun& run) {
  run = EncodedRun{};
  run.kind = EncodedKind::Records;
  run.count = count;
  run.height = static_cast<int>(shape.png->height);
  run.width = static_cast<int>(shape.png->width);
  run.png = shape.png;
  run.head_bytes = shape.head_bytes;
  run.align = shape.align;
  run.meta_stride = shape.meta_stride;
  PlanCarver carve(memory);
  run.record_at = carve.take<int64_t>(count + 1);
  run.tail_bytes = carve.take<int32_t>(count);
  run.meta = carve.take<char>(count * shape.meta_stride);
  const int64_t padded_png = aligned(static_cast<int64_t>(shape.png->bytes.size()), shape.align);
  // Each record's bytes into record_at[i + 1], on many threads; then summed in order.
  parallel_for(count, threads, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t tail = fill_meta(i, run.meta + i * shape.meta_stride);
      if (tail < 0 || shape.head_bytes + tail > shape.meta_stride) {
        throw std::logic_error("an encoded record's head and tail pass its meta's " + std::to_string(shape.meta_stride) +
                               " bytes");
      }
      run.tail_bytes[i] = static_cast<int32_t>(tail);
      run.record_at[i + 1] = shape.head_bytes + padded_png + aligned(tail, shape.align) + end_zeros(i);
    }
  });
  run.record_at[0] = 0;
  for (int64_t i = 0; i < count; ++i) run.record_at[i + 1] += run.record_at[i];
  run.used = run.record_at[count];
  if (run.used > memory.bytes_capacity) throw std::logic_error("an encoded run is larger than its memory");
  run.bytes = memory.bytes;
}

EncodedCapacity png_records_capacity(int64_t images, int width, int height) {
  return records_capacity({&png_stored_layout(width, height)}, images, 0, 0);
}

void plan_png_records(int64_t count, int width, int height, const EncodedMemory& memory, EncodedRun& run) {
  plan_records({&png_stored_layout(width, height)}, count, memory, [](int64_t, char*) { return int64_t{0}; },
               [](int64_t) { return int64_t{0}; }, 1, run);
}

void fill_mosaic_part(const MosaicPart& part, bool bgr_bottom_up, int height, int width, const RunPixels& image,
                      unsigned char* out) {
  const int64_t tile_row = int64_t{width} * 3;  // bytes of one pixel row of one tile
  for (int64_t t = 0; t < part.tiles; ++t) {
    const unsigned char* rgb = image(part.image + t);  // (height, width, 3)
    for (int y = 0; y < height; ++y) {
      // BMP rows are bottom-up: the tile's last pixel row comes first.
      unsigned char* dst = out + (bgr_bottom_up ? height - 1 - y : y) * part.span + t * part.tile_pitch;
      const unsigned char* src = rgb + y * tile_row;
      if (bgr_bottom_up) {
        for (int x = 0; x < width; ++x) {  // RGB in, BGR out
          dst[3 * x + 0] = src[3 * x + 2];
          dst[3 * x + 1] = src[3 * x + 1];
          dst[3 * x + 2] = src[3 * x + 0];
        }
      } else {
        std::memcpy(dst, src, static_cast<size_t>(tile_row));
      }
      if (t + 1 < part.tiles) std::memset(dst + tile_row, 0, static_cast<size_t>(part.tile_pitch - tile_row));
    }
  }
}

void encode_run_on_host(const EncodedRun& run, const unsigned char* rgb, int threads) {
  const int64_t image_bytes = int64_t{run.height} * run.width * 3;
  if (run.kind == EncodedKind::Records) {
    parallel_for(run.count, threads, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) fill_record(run, i, rgb + i * image_bytes);
    });
  } else if (run.kind == EncodedKind::Parts) {
    const RunPixels image = [&](int64_t k) { return rgb + k * image_bytes; };
    parallel_for(run.part_count, threads, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) {
        fill_mosaic_part(run.parts[k], run.bgr_bottom_up, run.height, run.width, image, run.bytes + run.parts[k].at);
      }
    });
  }
}

}  // namespace facegen
