// gpu_pipeline.hpp: host latents -> host images on one CUDA GPU, batch after batch, with the copies
// overlapped with the arithmetic.
//
// Everything is allocated once, in the constructor: the device network, one set of activations,
// two slots of (pinned latents, device latents, device images, pinned images). Three streams:
// uploads, compute, downloads. Batch b's latents upload while batch b-1 computes; batch b's images
// download while batch b+1 computes, and the host copies batch b-1's images out of pinned memory
// while the GPU works on batch b. A full batch runs as a captured CUDA graph (one per slot).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "generator/backend.hpp"
#include "kernels/generator_gpu.hpp"

namespace facegen {

class GpuPipeline {
 public:
  // network_floats: the network.bin layout. device: CUDA device index (the constructor selects it).
  GpuPipeline(const float* network_floats, Precision precision, int max_batch, int device);
  ~GpuPipeline();
  GpuPipeline(const GpuPipeline&) = delete;
  GpuPipeline& operator=(const GpuPipeline&) = delete;

  int max_batch() const { return max_batch_; }
  const DeviceNetwork& network() const { return *net_; }
  cudaStream_t compute_stream() const { return compute_; }

  // latents (n, 100) -> images (n, 64, 64, 3), both in host memory (pageable or pinned).
  void generate(const float* latents, int64_t n, float* images);

  // The device buffers of one slot (0 or 1), and one batch from that slot's latents into its images
  // on the compute stream (a graph replay when n == max_batch). For benchmarks and tests.
  float* device_latents(int slot) const { return d_latents_[slot]; }
  float* device_images(int slot) const { return d_images_[slot]; }
  void run_slot(int slot, int n);

  // Event timestamps of each batch of the next generate() calls, in ms from that call's start.
  struct BatchTimes {
    int images;
    float upload_begin, upload_end, compute_begin, compute_end, download_begin, download_end;
  };
  void record_timeline(bool on) { timeline_on_ = on; }
  const std::vector<BatchTimes>& timeline() const { return timeline_; }

 private:
  int max_batch_;
  int device_;
  std::unique_ptr<DeviceNetwork> net_;
  cudaStream_t upload_ = nullptr, compute_ = nullptr, download_ = nullptr;
  void* act_[4] = {};
  float* d_latents_[2] = {};
  float* d_images_[2] = {};
  float* h_latents_[2] = {};  // pinned
  float* h_images_[2] = {};   // pinned
  cudaEvent_t uploaded_[2] = {}, computed_[2] = {}, downloaded_[2] = {};
  cudaGraphExec_t graph_[2] = {};
  bool timeline_on_ = false;
  std::vector<BatchTimes> timeline_;
};

}  // namespace facegen
