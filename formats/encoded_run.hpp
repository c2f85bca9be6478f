// encoded_run.hpp: a run of 8-bit images already in an output format's bytes, as an encoder makes
// them in one buffer: the GPU's kernels (kernels/encode_images.hpp), straight into the page-locked
// buffer that the files are written from, or encode_run_on_host() here, their CPU model. The host
// plans each run from the format's own definitions (OutputLayout::plan_encoded_run: the PNG template
// of png_encoder.hpp, the tar frames of tar_shard.hpp, the mosaic parts of output_format.cpp); the
// encoder fills in what depends on the pixels; the writer puts the buffer in the files as whole
// blocks without reading a pixel. The bytes are those the format's CPU encoders make of the same pixels.
//
// Images are (count, height, width, 3) bytes, R G B fastest. Two kinds of run:
//   Records  png and tar at PNG level 0: a record per image, in image order, back to back. Image i's
//            is the bytes [record_at[i], record_at[i + 1]): its head (the first head_bytes of its
//            meta), its level-0 PNG (PngStoredLayout), zeros up to a multiple of `align` bytes from the
//            PNG's start, its tail (the next tail_bytes[i] of its meta), zeros to the record's end.
//            Image i's meta is at meta + i * meta_stride. A png folder's record is its PNG alone; a
//            tar sample's head is the PNG member's header and its tail the json member, and the zeros
//            after it pad the member and, after a shard's last sample, are the archive's end.
//   Parts    bmp, and mosaic-png's file of pixels: a mosaic's rows a part at a time (MosaicPart, the
//            pieces write_run cuts a run into): part k's height rows of span bytes are at
//            parts[k].at, back to back; row r is pixel row r of its tiles (height - 1 - r for bmp,
//            whose rows go bottom-up), each tile's pixels at tile_pitch bytes from the one before,
//            B G R for bmp, and zeros (the padding) between them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "formats/png_encoder.hpp"

namespace facegen {

// Where one part of a mosaic's run goes: height pixel rows of `span` bytes, one per file row from
// `offset` on, each file row row_bytes after the one before.
struct MosaicPart {
  size_t file = 0;         // the layout's file
  int64_t offset = 0;      // of its first row in the file
  int64_t row_bytes = 0;   // from one file row to the next
  int64_t span = 0;        // bytes of one of its rows: its tiles and the padding between them
  int64_t tile_pitch = 0;  // bytes from one tile's first pixel to the next one's
  int64_t image = 0;       // its first tile's image, counted from the run's first
  int64_t tiles = 0;
  int64_t at = 0;          // its rows in an encoded run's bytes
};

enum class EncodedKind { None, Records, Parts };

// One output's run of images in its format's bytes: the plan, and the buffer the encoder fills.
struct EncodedRun {
  EncodedKind kind = EncodedKind::None;
  int64_t count = 0;  // images
  int height = 0;     // of each image
  int width = 0;
  unsigned char* bytes = nullptr;  // the run's bytes, [0, used), as the encoder leaves them
  int64_t used = 0;
  // Records
  const PngStoredLayout* png = nullptr;
  int64_t head_bytes = 0;
  int64_t align = 1;
  int64_t meta_stride = 0;
  int64_t* record_at = nullptr;    // (count + 1), record_at[0] = 0, record_at[count] = used
  int32_t* tail_bytes = nullptr;   // (count)
  char* meta = nullptr;            // (count, meta_stride)
  // Parts
  bool bgr_bottom_up = false;      // bmp; else mosaic-png's pixels: R G B, rows top-down
  MosaicPart* parts = nullptr;     // (part_count), in order, part k + 1's bytes right after part k's
  int64_t part_count = 0;
};

// The memory of an encoded run: its bytes, and its plan's arrays (record_at, ...), carved from `plan`.
// Page-locked where a GPU reads the plan and writes the bytes.
struct EncodedMemory {
  unsigned char* bytes = nullptr;
  int64_t bytes_capacity = 0;
  unsigned char* plan = nullptr;
  int64_t plan_capacity = 0;
};
// What a run of at most `images` images of one output takes (OutputLayout::encoded_capacity).
struct EncodedCapacity {
  int64_t bytes = 0;
  int64_t plan_bytes = 0;
};

// What a job of a backend's stream asks for besides (or instead of) the pixels (generator/backend.hpp):
// each output's run, made from the job's images.
struct EncodedRuns {
  bool pixels = false;  // the pixels too: an output writes them as they are (npy-u8) or encodes them on the host
  std::vector<const EncodedRun*> runs;
};

// A run of records (see above): each image's PNG of png's size, its head and tail from its meta, and
// the zeros that pad each to a multiple of `align` and end the record.
struct RecordShape {
  const PngStoredLayout* png = nullptr;
  int64_t head_bytes = 0;
  int64_t align = 1;
  int64_t meta_stride = 0;  // at least head_bytes plus the longest tail
};
// The plan of a run of `count` records into `memory`: fill_meta(i, meta) writes image i's meta (its
// head, then its tail) at `meta` (meta_stride bytes) and returns its tail's bytes; end_zeros(i) gives
// the zero bytes that end image i's record after its tail's padding (a tar shard's end); both on up to
// `threads` threads. The record of image i: head_bytes + padded PNG + padded tail + end_zeros(i).
// Throws std::logic_error where the memory is too small.
using RecordMeta = std::function<int64_t(int64_t i, char* meta)>;
void plan_records(const RecordShape& shape, int64_t count, const EncodedMemory& memory, const RecordMeta& fill_meta,
                  const std::function<int64_t(int64_t i)>& end_zeros, int threads, EncodedRun& run);
// What plan_records needs at most for `images` records with tails of at most max_tail bytes and
// end_zeros summing to at most end_bytes over the run.
EncodedCapacity records_capacity(const RecordShape& shape, int64_t images, int64_t max_tail, int64_t end_bytes);
// A run of level-0 PNGs of width x height, one record each and nothing else: the png folder's, and
// any caller's (the service's answers).
void plan_png_records(int64_t count, int width, int height, const EncodedMemory& memory, EncodedRun& run);
EncodedCapacity png_records_capacity(int64_t images, int width, int height);

// The CPU model of the GPU's encoders: the run's bytes from its images (count, height, width, 3), on up
// to `threads` threads. The same bytes as the kernels, and as the formats' own encoders.
void encode_run_on_host(const EncodedRun& run, const unsigned char* rgb, int threads = 1);
// One part of a mosaic into `out` (height x span bytes), image(k) giving the pixels (height, width, 3)
// of image k of the run: what write_run fills on the host, and encode_run_on_host's parts.
using RunPixels = std::function<const unsigned char*(int64_t image)>;
void fill_mosaic_part(const MosaicPart& part, bool bgr_bottom_up, int height, int width, const RunPixels& image,
                      unsigned char* out);

}  // namespace facegen
