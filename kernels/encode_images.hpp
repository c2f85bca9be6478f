// encode_images.hpp: 8-bit images (n, height, width, 3) on the GPU made into the bytes of their
// output formats (formats/encoded_run.hpp): level-0 PNG files inside records (the png folder's
// files, tar samples), and the parts of a mosaic (bmp rows, mosaic-png's pixel rows).
//
// The host plans every byte that does not depend on the pixels (the PNG template, the records' heads
// and tails, where each record and part goes); these kernels fill in the pixels and the checksums
// that depend on them. CPU references, which the bytes equal exactly: encode_run_on_host
// (formats/encoded_run.hpp, the encoders' CPU model) and the formats' own encoders (PngEncoder at
// level 0, OutputLayout's tar records and mosaic writes), held to them in tests/gpu/test_encode_gpu.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/checksum_parts.hpp"

namespace facegen {
namespace gpu {

// A level-0 PNG of width x height (formats/png_encoder.hpp's PngStoredLayout) with its template in
// device memory, and the constants of its CRC in parts (checksum_parts.hpp).
struct PngTemplate {
  const unsigned char* bytes = nullptr;  // device, png_bytes, then zeros to a multiple of 16
  int64_t png_bytes = 0;
  int64_t crc_from = 0, crc_at = 0, blocks_at = 0, adler_at = 0;
  int64_t raw_bytes = 0, block_bytes = 0, block_header = 0;
  int width = 0, height = 0;
  checksum::CrcParts crc;  // of [crc_from, crc_at), in kRecordThreads parts
};
constexpr int kRecordThreads = 256;  // a block per image
// The crc member for a template whose other members are set.
void prepare_png_crc(PngTemplate& png);
// Shared memory that a record's block takes (the PNG staged whole, the CRC table, the sums).
size_t record_shared_bytes(const PngTemplate& png);

// A run of records (formats/encoded_run.hpp's Records), its plan in device memory.
struct RecordPlan {
  const int64_t* record_at = nullptr;  // (n + 1)
  const int32_t* tail_bytes = nullptr; // (n)
  const char* meta = nullptr;          // (n, meta_stride)
  int64_t meta_stride = 0;
  int64_t head_bytes = 0;
  int64_t align = 1;
};

// rgb (n, height, width, 3) device bytes -> the run's records at out + record_at[i] - record_at[0],
// every byte of each written.
void launch_encode_records(const unsigned char* rgb, int n, const PngTemplate& png, const RecordPlan& plan,
                           unsigned char* out, cudaStream_t stream);

// One part of a mosaic's run (formats/encoded_run.hpp's MosaicPart, the fields the bytes depend on).
struct MosaicPartBytes {
  int64_t at;          // of its height rows of `span` bytes in out
  int64_t span;
  int64_t tile_pitch;  // bytes from one tile to the next in a row
  int64_t image;       // its first tile's image in rgb
  int64_t tiles;
};
// rgb (images, height, width, 3) -> each part's rows, every byte written (the padding between tiles
// as zeros); bgr_bottom_up: B G R and rows bottom-up (bmp), else R G B top-down.
void launch_encode_mosaic_parts(const unsigned char* rgb, int height, int width, const MosaicPartBytes* parts,
                                int part_count, bool bgr_bottom_up, unsigned char* out, cudaStream_t stream);

}  // namespace gpu
}  // namespace facegen
