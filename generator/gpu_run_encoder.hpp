// gpu_run_encoder.hpp: the GPU pipeline's encode stage: a job's 8-bit images (n, height, width, 3),
// gathered on the device batch by batch, made into each of the job's encoded runs
// (formats/encoded_run.hpp) by the kernels of kernels/encode_images.hpp, and downloaded straight into
// the runs' bytes (page-locked: the output engine's buffers), so that the host writes whole blocks
// and reads no pixel.
//
// A job takes one of kSlots slots of device memory (its images, each run's plan and bytes), grown to
// the largest job seen. The kernels run on a stream of the encoder's own, beside the network's next
// batches. Every wait between jobs is an event on the GPU: a slot's plans are uploaded, and its
// images gathered, once the slot's last job's kernels have read theirs; its kernels run once its
// images and plans are in and its last job's bytes have been downloaded. Only wait_job() waits on
// the host. kSlots is the GPU pipeline's depth (batches in flight), so a slot is never reused before
// the host has waited for its last job.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <vector>

#include "formats/encoded_run.hpp"
#include "kernels/encode_images.hpp"

namespace facegen {

class GpuRunEncoder {
 public:
  static constexpr int kSlots = 3;

  explicit GpuRunEncoder(int device);
  ~GpuRunEncoder();
  GpuRunEncoder(const GpuRunEncoder&) = delete;
  GpuRunEncoder& operator=(const GpuRunEncoder&) = delete;

  // A job of n images whose runs are `runs` (each planned for those n): its slot, whose plans are
  // uploaded on `upload`. The runs must outlive the job's wait_job().
  int begin_job(const EncodedRuns& runs, int64_t n, cudaStream_t upload);
  // Images [first, first + count) of the job, 8-bit, from device memory (copied on `compute`).
  void add_images(int slot, const unsigned char* rgb, int64_t first, int64_t count, cudaStream_t compute);
  // Every image is in (on `compute`): the kernels on the encoder's stream, the runs' bytes down on
  // `download`.
  void end_job(int slot, cudaStream_t compute, cudaStream_t download);
  void wait_job(int slot);  // the job's bytes are in its runs

  // All at once for a caller whose images (n, height, width, 3) are on the device: every run of
  // `runs` made and downloaded on `stream`, then waited for.
  void encode(const EncodedRuns& runs, const unsigned char* rgb, int64_t n, cudaStream_t stream);

 private:
  struct Slot;
  // The device template of a PNG layout, uploaded on first use.
  const gpu::PngTemplate& png_template(const PngStoredLayout& layout);
  void grow(Slot& slot, size_t bytes);

  int device_;
  cudaStream_t encode_ = nullptr;
  int64_t jobs_ = 0;
  std::vector<Slot> slots_;
  std::map<const PngStoredLayout*, gpu::PngTemplate> templates_;
};

}  // namespace facegen
