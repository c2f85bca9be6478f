// gpu_run_encoder.cu: see gpu_run_encoder.hpp.
#include "generator/gpu_run_encoder.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "common/cuda_check.cuh"

namespace facegen {
namespace {

constexpr size_t kDeviceAlign = 256;
size_t device_aligned(size_t bytes) { return (bytes + kDeviceAlign - 1) / kDeviceAlign * kDeviceAlign; }

}  // namespace

struct GpuRunEncoder::Slot {
  unsigned char* memory = nullptr;  // device: the job's images, then each run's plan and bytes
  size_t capacity = 0;
  gpu::MosaicPartBytes* staged = nullptr;  // page-locked: the parts of the job's mosaic runs, as uploaded
  size_t staged_capacity = 0;             // parts
  cudaEvent_t uploaded = nullptr, gathered = nullptr, encoded = nullptr, downloaded = nullptr;
  // The job in the slot.
  struct Run {
    const EncodedRun* run;
    gpu::RecordPlan plan;             // device pointers (records)
    gpu::MosaicPartBytes* parts;      // device (parts)
    unsigned char* bytes;             // device
  };
  unsigned char* images = nullptr;  // device (n, height, width, 3)
  int64_t image_bytes = 0;
  std::vector<Run> runs;
};

GpuRunEncoder::GpuRunEncoder(int device) : device_(device), slots_(kSlots) {
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaStreamCreateWithFlags(&encode_, cudaStreamNonBlocking));
  for (Slot& slot : slots_) {
    CUDA_CHECK(cudaEventCreateWithFlags(&slot.uploaded, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&slot.gathered, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&slot.encoded, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&slot.downloaded, cudaEventDisableTiming));
  }
}

GpuRunEncoder::~GpuRunEncoder() {
  // Teardown errors cannot be reported from a destructor; a broken device shows up on the next call.
  cudaSetDevice(device_);
  cudaDeviceSynchronize();
  for (Slot& slot : slots_) {
    cudaFree(slot.memory);
    cudaFreeHost(slot.staged);
    cudaEventDestroy(slot.uploaded);
    cudaEventDestroy(slot.gathered);
    cudaEventDestroy(slot.encoded);
    cudaEventDestroy(slot.downloaded);
  }
  for (auto& entry : templates_) cudaFree(const_cast<unsigned char*>(entry.second.bytes));
  cudaStreamDestroy(encode_);
}

const gpu::PngTemplate& GpuRunEncoder::png_template(const PngStoredLayout& layout) {
  auto found = templates_.find(&layout);
  if (found != templates_.end()) return found->second;
  gpu::PngTemplate png;
  unsigned char* bytes = nullptr;
  const size_t padded = (layout.bytes.size() + 15) / 16 * 16;  // the kernel reads it in 16-byte words
  CUDA_CHECK(cudaMalloc(&bytes, padded));
  CUDA_CHECK(cudaMemset(bytes, 0, padded));
  CUDA_CHECK(cudaMemcpy(bytes, layout.bytes.data(), layout.bytes.size(), cudaMemcpyHostToDevice));
  png.bytes = bytes;
  png.png_bytes = static_cast<int64_t>(layout.bytes.size());
  png.crc_from = layout.crc_from;
  png.crc_at = layout.crc_at;
  png.blocks_at = layout.blocks_at;
  png.adler_at = layout.adler_at;
  png.raw_bytes = layout.raw_bytes;
  png.block_bytes = layout.block_bytes;
  png.block_header = layout.block_header;
  png.width = static_cast<int>(layout.width);
  png.height = static_cast<int>(layout.height);
  gpu::prepare_png_crc(png);
  return templates_.emplace(&layout, png).first->second;
}

void GpuRunEncoder::grow(Slot& slot, size_t bytes) {
  if (bytes <= slot.capacity) return;
  // Rare (the first jobs): every slot's work is let finish before the memory changes hands.
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaFree(slot.memory));
  slot.memory = nullptr;
  slot.capacity = 0;
  const size_t with_room = bytes + bytes / 8;  // jobs of records vary a little in their bytes
  CUDA_CHECK(cudaMalloc(&slot.memory, with_room));
  slot.capacity = with_room;
}

int GpuRunEncoder::begin_job(const EncodedRuns& runs, int64_t n, cudaStream_t upload) {
  CUDA_CHECK(cudaSetDevice(device_));
  const int s = static_cast<int>(jobs_++ % kSlots);
  Slot& slot = slots_[s];
  if (runs.runs.empty()) throw std::logic_error("GpuRunEncoder: a job without encoded runs");
  CUDA_CHECK(cudaEventSynchronize(slot.uploaded));  // its page-locked parts are read (long since, in a stream)
  const int height = runs.runs.front()->height, width = runs.runs.front()->width;
  slot.image_bytes = int64_t{height} * width * 3;
  // Where everything goes in the slot's memory: the images, then per run its plan and its bytes.
  size_t bytes = device_aligned(static_cast<size_t>(n * slot.image_bytes));
  size_t parts = 0;
  for (const EncodedRun* run : runs.runs) {
    if (run->count != n || run->height != height || run->width != width) {
      throw std::logic_error("GpuRunEncoder: a run planned for other images than the job's");
    }
    if (run->kind == EncodedKind::Records) {
      bytes += device_aligned(sizeof(int64_t) * (n + 1)) + device_aligned(sizeof(int32_t) * n) +
               device_aligned(static_cast<size_t>(n * run->meta_stride));
    } else {
      bytes += device_aligned(sizeof(gpu::MosaicPartBytes) * run->part_count);
      parts += static_cast<size_t>(run->part_count);
    }
    bytes += device_aligned(static_cast<size_t>(run->used));
  }
  grow(slot, bytes);
  if (parts > slot.staged_capacity) {  // the host last read it before the slot's last job ended
    CUDA_CHECK(cudaFreeHost(slot.staged));
    slot.staged = nullptr;
    slot.staged_capacity = 0;
    CUDA_CHECK(cudaMallocHost(&slot.staged, sizeof(gpu::MosaicPartBytes) * parts));
    slot.staged_capacity = parts;
  }
  // The slot's last job's kernels have read its plans before these replace them.
  CUDA_CHECK(cudaStreamWaitEvent(upload, slot.encoded, 0));
  unsigned char* at = slot.memory;
  auto take = [&](size_t size) {
    unsigned char* taken = at;
    at += device_aligned(size);
    return taken;
  };
  slot.images = take(static_cast<size_t>(n * slot.image_bytes));
  slot.runs.clear();
  size_t staged = 0;
  for (const EncodedRun* run : runs.runs) {
    Slot::Run placed{run, {}, nullptr, nullptr};
    if (run->kind == EncodedKind::Records) {
      gpu::RecordPlan& plan = placed.plan;
      auto* record_at = reinterpret_cast<int64_t*>(take(sizeof(int64_t) * (n + 1)));
      auto* tail_bytes = reinterpret_cast<int32_t*>(take(sizeof(int32_t) * n));
      auto* meta = reinterpret_cast<char*>(take(static_cast<size_t>(n * run->meta_stride)));
      CUDA_CHECK(cudaMemcpyAsync(record_at, run->record_at, sizeof(int64_t) * (n + 1), cudaMemcpyHostToDevice, upload));
      CUDA_CHECK(cudaMemcpyAsync(tail_bytes, run->tail_bytes, sizeof(int32_t) * n, cudaMemcpyHostToDevice, upload));
      if (n * run->meta_stride > 0) {
        CUDA_CHECK(cudaMemcpyAsync(meta, run->meta, static_cast<size_t>(n * run->meta_stride), cudaMemcpyHostToDevice,
                                   upload));
      }
      plan = {record_at, tail_bytes, meta, run->meta_stride, run->head_bytes, run->align};
      png_template(*run->png);
    } else {
      placed.parts = reinterpret_cast<gpu::MosaicPartBytes*>(take(sizeof(gpu::MosaicPartBytes) * run->part_count));
      gpu::MosaicPartBytes* from = slot.staged + staged;
      for (int64_t k = 0; k < run->part_count; ++k) {
        const MosaicPart& part = run->parts[k];
        from[k] = {part.at, part.span, part.tile_pitch, part.image, part.tiles};
      }
      staged += static_cast<size_t>(run->part_count);
      CUDA_CHECK(cudaMemcpyAsync(placed.parts, from, sizeof(gpu::MosaicPartBytes) * run->part_count,
                                 cudaMemcpyHostToDevice, upload));
    }
    placed.bytes = take(static_cast<size_t>(run->used));
    slot.runs.push_back(placed);
  }
  CUDA_CHECK(cudaEventRecord(slot.uploaded, upload));
  return s;
}

void GpuRunEncoder::add_images(int s, const unsigned char* rgb, int64_t first, int64_t count, cudaStream_t compute) {
  Slot& slot = slots_[s];
  if (first == 0) CUDA_CHECK(cudaStreamWaitEvent(compute, slot.encoded, 0));  // the slot's last job's images are read
  CUDA_CHECK(cudaMemcpyAsync(slot.images + first * slot.image_bytes, rgb, static_cast<size_t>(count * slot.image_bytes),
                             cudaMemcpyDeviceToDevice, compute));
}

void GpuRunEncoder::end_job(int s, cudaStream_t compute, cudaStream_t download) {
  Slot& slot = slots_[s];
  // Its images and plans are in, and the slot's last job's bytes are down before these replace them.
  CUDA_CHECK(cudaEventRecord(slot.gathered, compute));
  CUDA_CHECK(cudaStreamWaitEvent(encode_, slot.gathered, 0));
  CUDA_CHECK(cudaStreamWaitEvent(encode_, slot.uploaded, 0));
  CUDA_CHECK(cudaStreamWaitEvent(encode_, slot.downloaded, 0));
  for (const Slot::Run& placed : slot.runs) {
    const EncodedRun& run = *placed.run;
    if (run.kind == EncodedKind::Records) {
      gpu::launch_encode_records(slot.images, static_cast<int>(run.count), png_template(*run.png), placed.plan,
                                 placed.bytes, encode_);
    } else {
      gpu::launch_encode_mosaic_parts(slot.images, run.height, run.width, placed.parts, static_cast<int>(run.part_count),
                                      run.bgr_bottom_up, placed.bytes, encode_);
    }
  }
  CUDA_CHECK(cudaEventRecord(slot.encoded, encode_));
  CUDA_CHECK(cudaStreamWaitEvent(download, slot.encoded, 0));
  for (const Slot::Run& placed : slot.runs) {
    if (placed.run->used == 0) continue;
    CUDA_CHECK(cudaMemcpyAsync(placed.run->bytes, placed.bytes, static_cast<size_t>(placed.run->used),
                               cudaMemcpyDeviceToHost, download));
  }
  CUDA_CHECK(cudaEventRecord(slot.downloaded, download));
}

void GpuRunEncoder::wait_job(int s) { CUDA_CHECK(cudaEventSynchronize(slots_[s].downloaded)); }

void GpuRunEncoder::encode(const EncodedRuns& runs, const unsigned char* rgb, int64_t n, cudaStream_t stream) {
  const int s = begin_job(runs, n, stream);
  add_images(s, rgb, 0, n, stream);
  end_job(s, stream, stream);
  wait_job(s);
}

}  // namespace facegen
