// encode_images.cu: see encode_images.hpp.
//
// Records: a block per image. Its PNG is staged whole in shared memory: the template copied in, the
// pixels put where the stored blocks keep them; the Adler-32 of the raw bytes and then the CRC-32 of
// the IDAT chunk (which covers the Adler-32) are summed over a contiguous part per thread and joined
// (checksum_parts.hpp); then the record goes out in one coalesced pass: head, PNG, zeros, tail, zeros.
// Mosaic parts: a block per (part, pixel row), each byte of the row one thread's.
#include "kernels/encode_images.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "common/cuda_check.cuh"

namespace facegen {
namespace gpu {

namespace {

static_assert(kRecordThreads == 256, "a record's block fills the 256 entries of the CRC table, one a thread");
constexpr int kWarps = kRecordThreads / 32;
constexpr int64_t kSharedAlign = 16;

__host__ __device__ constexpr int64_t shared_aligned(int64_t bytes) {
  return (bytes + kSharedAlign - 1) / kSharedAlign * kSharedAlign;
}

// Where raw byte r of the zlib stream lies in the PNG (PngStoredLayout::raw_at); a picture of one
// stored block (64 x 64 and 128 x 128) needs no division.
__device__ __forceinline__ int raw_at(const PngTemplate& png, int r) {
  if (png.raw_bytes <= png.block_bytes) return static_cast<int>(png.blocks_at + png.block_header) + r;
  const int block = r / static_cast<int>(png.block_bytes);
  return static_cast<int>(png.blocks_at + png.block_header) + r + block * static_cast<int>(png.block_header);
}

__device__ __forceinline__ void put_be32(uint8_t* at, uint32_t v) {
  at[0] = static_cast<uint8_t>(v >> 24);
  at[1] = static_cast<uint8_t>(v >> 16);
  at[2] = static_cast<uint8_t>(v >> 8);
  at[3] = static_cast<uint8_t>(v);
}

__device__ __forceinline__ unsigned long long warp_sum(unsigned long long v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

// Both sums over the block, in thread 0; `scratch` holds 2 kWarps values.
__device__ void block_sums(unsigned long long& a, unsigned long long& b, unsigned long long* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  a = warp_sum(a);
  b = warp_sum(b);
  if (lane == 0) {
    scratch[warp] = a;
    scratch[kWarps + warp] = b;
  }
  __syncthreads();
  if (warp == 0) {
    a = warp_sum(lane < kWarps ? scratch[lane] : 0ull);
    b = warp_sum(lane < kWarps ? scratch[kWarps + lane] : 0ull);
  }
}

// The template (padded to 16 bytes on the device, as `file`), then the pixels (height, width, 3) where
// the stored blocks keep them: four bytes a thread where a pixel row is whole words (any width that is
// a multiple of 4), else a byte.
__device__ void stage_png(const PngTemplate& png, const uint8_t* __restrict__ pixels, uint8_t* file) {
  const uint4* from = reinterpret_cast<const uint4*>(png.bytes);
  uint4* to = reinterpret_cast<uint4*>(file);
  for (int w = threadIdx.x; w < shared_aligned(png.png_bytes) / kSharedAlign; w += kRecordThreads) to[w] = from[w];
  __syncthreads();
  const int pixel_row = 3 * png.width;
  const int row_bytes = pixel_row + 1;  // its filter byte first
  if (pixel_row % 4 == 0) {
    const int words_per_row = pixel_row / 4;
    const uint32_t* words = reinterpret_cast<const uint32_t*>(pixels);
    for (int w = threadIdx.x; w < words_per_row * png.height; w += kRecordThreads) {
      const int y = w / words_per_row;
      const int r = y * row_bytes + 1 + 4 * (w - y * words_per_row);
      const uint32_t four = words[w];
      for (int b = 0; b < 4; ++b) file[raw_at(png, r + b)] = static_cast<uint8_t>(four >> (8 * b));
    }
  } else {
    for (int k = threadIdx.x; k < pixel_row * png.height; k += kRecordThreads) {
      const int y = k / pixel_row;
      file[raw_at(png, y * row_bytes + 1 + (k - y * pixel_row))] = pixels[k];
    }
  }
  __syncthreads();
}

// The Adler-32 of the raw bytes into the staged PNG, each thread a contiguous part of them.
__device__ void put_adler(const PngTemplate& png, uint8_t* file, unsigned long long* scratch) {
  const int raw_bytes = static_cast<int>(png.raw_bytes);
  const int part = (raw_bytes + kRecordThreads - 1) / kRecordThreads;
  const int begin = threadIdx.x * part, end = min(raw_bytes, begin + part);
  unsigned long long sum = 0, weighted = 0;
  if (begin < end) {
    int at = raw_at(png, begin);
    int left = static_cast<int>(png.block_bytes) - begin % static_cast<int>(png.block_bytes);  // before the next block's header
    for (int r = begin; r < end; ++r) {
      const unsigned v = file[at];
      sum += v;
      weighted += static_cast<unsigned long long>(raw_bytes - r) * v;
      ++at;
      if (--left == 0) {
        at += static_cast<int>(png.block_header);
        left = static_cast<int>(png.block_bytes);
      }
    }
  }
  block_sums(sum, weighted, scratch);
  if (threadIdx.x == 0) {
    put_be32(file + png.adler_at, checksum::adler_finish(sum, weighted, static_cast<uint64_t>(raw_bytes)));
  }
  __syncthreads();
}

// The IDAT chunk's CRC-32 into the staged PNG: a part per thread, joined in rounds.
__device__ void put_crc(const PngTemplate& png, uint8_t* file, const uint32_t* table, uint32_t* parts) {
  const int64_t bytes = png.crc_at - png.crc_from;
  const int end = static_cast<int>(checksum::crc_part_end(png.crc, bytes, kRecordThreads, threadIdx.x));
  const uint8_t* message = file + png.crc_from;
  uint32_t raw = 0;
  for (int p = max(0, end - static_cast<int>(png.crc.part_bytes)); p < end; ++p) raw = checksum::crc_update(raw, message[p], table);
  parts[threadIdx.x] = raw;
  __syncthreads();
  for (int round = 0; round < png.crc.rounds; ++round) {
    const int stride = 1 << round;
    if (threadIdx.x % (2 * stride) == 0) {
      parts[threadIdx.x] = checksum::crc_join(png.crc, round, parts[threadIdx.x], parts[threadIdx.x + stride]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) put_be32(file + png.crc_at, checksum::crc_finish(png.crc, parts[0]));
  __syncthreads();
}

__global__ void __launch_bounds__(kRecordThreads)
encode_records(const uint8_t* __restrict__ rgb,  // (n, height, width, 3)
               PngTemplate png, RecordPlan plan,
               uint8_t* __restrict__ out) {      // the records, from record_at[0]
  extern __shared__ uint4 shared_words[];
  uint8_t* file = reinterpret_cast<uint8_t*>(shared_words);  // (png_bytes): the PNG
  uint32_t* table = reinterpret_cast<uint32_t*>(file + shared_aligned(png.png_bytes));  // (256)
  uint32_t* parts = table + 256;                                                       // (kRecordThreads)
  unsigned long long* scratch = reinterpret_cast<unsigned long long*>(parts + kRecordThreads);  // (2 kWarps)
  const int64_t i = blockIdx.x;
  table[threadIdx.x] = checksum::crc_table_entry(threadIdx.x);
  stage_png(png, rgb + i * png.width * png.height * 3, file);
  put_adler(png, file, scratch);
  put_crc(png, file, table, parts);
  // The record: head, PNG, zeros to `align`, tail, zeros to the record's end.
  const int64_t begin = plan.record_at[i];
  const int record_bytes = static_cast<int>(plan.record_at[i + 1] - begin);
  uint8_t* record = out + (begin - plan.record_at[0]);
  const char* meta = plan.meta + i * plan.meta_stride;
  const int head = static_cast<int>(plan.head_bytes), png_bytes = static_cast<int>(png.png_bytes);
  const int tail_at = head + static_cast<int>((png.png_bytes + plan.align - 1) / plan.align * plan.align);
  const int tail_end = tail_at + plan.tail_bytes[i];
  for (int p = threadIdx.x; p < head; p += kRecordThreads) record[p] = static_cast<uint8_t>(meta[p]);
  for (int p = threadIdx.x; p < png_bytes; p += kRecordThreads) record[head + p] = file[p];
  for (int p = head + png_bytes + threadIdx.x; p < tail_at; p += kRecordThreads) record[p] = 0;
  for (int p = tail_at + threadIdx.x; p < tail_end; p += kRecordThreads) record[p] = static_cast<uint8_t>(meta[head + p - tail_at]);
  for (int p = tail_end + threadIdx.x; p < record_bytes; p += kRecordThreads) record[p] = 0;
}

__global__ void encode_mosaic_parts(const uint8_t* __restrict__ rgb,  // (images, height, width, 3)
                                    int height, int width, const MosaicPartBytes* __restrict__ parts, int part_count,
                                    bool bgr_bottom_up, uint8_t* __restrict__ out) {
  const int row = blockIdx.x;  // of the part's rows, as they lie in out
  const int y = bgr_bottom_up ? height - 1 - row : row;
  const int64_t tile_row = 3 * int64_t{width};
  for (int k = blockIdx.y; k < part_count; k += gridDim.y) {
    const MosaicPartBytes part = parts[k];
    uint8_t* dst = out + part.at + row * part.span;
    for (int64_t b = threadIdx.x; b < part.span; b += blockDim.x) {
      const int64_t tile = b / part.tile_pitch;
      const int64_t x = b - tile * part.tile_pitch;  // byte in the tile's row, or in the padding after it
      uint8_t v = 0;
      if (x < tile_row) {
        const int64_t channel = x % 3;
        const int64_t from = bgr_bottom_up ? x - channel + (2 - channel) : x;  // BGR from RGB
        v = rgb[(part.image + tile) * height * tile_row + y * tile_row + from];
      }
      dst[b] = v;
    }
  }
}

}  // namespace

void prepare_png_crc(PngTemplate& png) { png.crc = checksum::crc_parts(png.crc_at - png.crc_from, kRecordThreads); }

size_t record_shared_bytes(const PngTemplate& png) {
  return static_cast<size_t>(shared_aligned(png.png_bytes)) + sizeof(uint32_t) * (256 + kRecordThreads) +
         sizeof(unsigned long long) * 2 * kWarps;
}

void launch_encode_records(const unsigned char* rgb, int n, const PngTemplate& png, const RecordPlan& plan,
                           unsigned char* out, cudaStream_t stream) {
  if (n <= 0) return;
  const size_t shared = record_shared_bytes(png);
  int device = 0, most = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (shared > static_cast<size_t>(most)) {
    throw std::invalid_argument("GPU PNG encoder: a " + std::to_string(png.width) + " x " + std::to_string(png.height) +
                                " image takes " + std::to_string(shared) + " bytes of shared memory, more than the " +
                                std::to_string(most) + " this GPU gives a block");
  }
  CUDA_CHECK(cudaFuncSetAttribute(encode_records, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)));
  encode_records<<<n, kRecordThreads, shared, stream>>>(rgb, png, plan, out);
  CUDA_CHECK_LAUNCH();
}

void launch_encode_mosaic_parts(const unsigned char* rgb, int height, int width, const MosaicPartBytes* parts,
                                int part_count, bool bgr_bottom_up, unsigned char* out, cudaStream_t stream) {
  if (part_count <= 0) return;
  const dim3 grid(static_cast<unsigned>(height), static_cast<unsigned>(std::min(part_count, 65535)));
  encode_mosaic_parts<<<grid, 256, 0, stream>>>(rgb, height, width, parts, part_count, bgr_bottom_up, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace gpu
}  // namespace facegen
