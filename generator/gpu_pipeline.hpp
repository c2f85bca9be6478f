// gpu_pipeline.hpp: host latents -> host images on one CUDA GPU, batch after batch, with the copies
// overlapped with the arithmetic.
//
// Everything is allocated once, in the constructor: the device network, one set of activations,
// two device slots of (pinned latents, device latents, device images) and three pinned image slots.
// Three streams: uploads, compute, downloads. The host keeps two batches queued ahead of the one it
// is copying out: while it copies batch b's images out of pinned memory, batches b+1 and b+2 are
// already uploaded, computed and downloaded as fast as the GPU goes. Device and pinned buffers are
// separate rings, so the GPU never waits on a host copy: a device slot is free again once its
// download has read it (an event, no host wait); only a download waits on the host, for its pinned
// slot, which the host emptied three batches earlier. Downloads go in chunks, each with its event,
// so the host copies a batch's first images while its last ones are still in flight. A full batch
// runs as a captured CUDA graph (one per device slot; run_slot's, of the network alone, apart).
//
// bf16 runs bring their images over PCIe as float16 (image_transfer()): at 48 KB of float32 per
// image the host link (55 GB/s on an H200) carries 1.12M images/s, less than bf16's kernels make
// (1.5M/s at batch 8192), and tanh's outputs in [-1, 1] lose at most 2^-12 (2.4e-4) in float16,
// 1/140 of bf16 arithmetic's own error. The GPU rounds the batch's images once more after the
// network (kernels/image_output.hpp) into a float16 device buffer, which is downloaded instead; the
// host widens them back exactly (common/half_float.hpp) as it copies them out. fp32 and tf32 runs
// keep float32 images end to end.
//
// Runs whose every format is 8-bit (formats/image_run.hpp) bring 8-bit RGB pixels over PCIe instead,
// 12 KB an image, made on the GPU from the values the host would otherwise receive (float16-rounded
// in bf16), so the bytes are those of the host's conversion. Every batch's images are also scanned
// on the GPU (kernels/image_output.hpp) and their flags (a byte an image) come down beside them, so
// the host never reads the images to check them.
//
// A stream's job of drawn latents (StreamJob::recipe) has them made on the GPU instead of uploaded, on
// the upload stream (created with the highest priority, so that the small kernels go ahead of the
// network's), bit for bit the host's (generator/device_latents.hpp); the host makes no latent value.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/model_spec.hpp"
#include "common/precision.hpp"
#include "formats/image_run.hpp"
#include "generator/backend.hpp"
#include "kernels/generator_gpu.hpp"

namespace facegen {

class DeviceLatents;
class ThreadShare;

// How a run's images cross PCIe: float32, float16 for bf16, or 8-bit RGB pixels for a run of 8-bit
// formats (see above). The one decision.
enum class ImageTransfer { Float32, Float16, Rgb8 };
ImageTransfer image_transfer(Precision precision, ImageEncoding encoding = ImageEncoding::Float32);

// Whether `p` is page-locked host memory (cudaHostAlloc or registered), which a download can land in.
bool is_page_locked(const void* p);

// One download chunk of images where it landed in a pinned slot: count images of values_per_image
// values each, (count, 64, 64, nc), in `format` (Rgb8: (count, 64, 64, 3) bytes), and their scan flags
// (count) (generator/finite_check.hpp).
struct PinnedImages {
  const void* data;
  ImageTransfer format;
  int count;
  int values_per_image;
  const uint8_t* flags;

  size_t values() const { return size_t(count) * values_per_image; }
  size_t bytes() const;  // of data
  float value(size_t i) const;  // value i (0 .. values() - 1) as float32; not for Rgb8
  // Values [begin, end) as float32 into out[0 .. end - begin); not for Rgb8.
  void to_floats(size_t begin, size_t end, float* out) const;
};

class GpuPipeline {
 public:
  // network_floats: the flat layout of `spec` (network.bin's for kShpcSpec), run by DeviceNetwork
  // (kernels/generator_gpu.hpp). device: CUDA device index (the constructor selects it).
  // encoding: what generate_checked() delivers (8-bit RGB only where asked for).
  GpuPipeline(const float* network_floats, const ModelSpec& spec, Precision precision, int max_batch, int device,
              ImageEncoding encoding = ImageEncoding::Float32);
  // The SHPC network.
  GpuPipeline(const float* network_floats, Precision precision, int max_batch, int device)
      : GpuPipeline(network_floats, kShpcSpec, precision, max_batch, device) {}
  ~GpuPipeline();
  GpuPipeline(const GpuPipeline&) = delete;
  GpuPipeline& operator=(const GpuPipeline&) = delete;

  int max_batch() const { return max_batch_; }
  ImageTransfer transfer() const { return transfer_; }
  const ModelSpec& spec() const { return spec_; }
  // The network's layers on the device.
  const DeviceNetwork& network() const { return *net_; }
  cudaStream_t compute_stream() const { return compute_; }

  // latents (n, nz) -> images (n, 64, 64, nc), both in host memory (pageable or pinned). Not for a
  // pipeline of 8-bit RGB images.
  void generate(const float* latents, int64_t n, float* images);
  // latents (n, nz) -> the images in the pipeline's encoding (float32 values, or (n, 64, 64, 3) bytes)
  // and each image's scan flags (n), all in host memory.
  void generate_checked(const float* latents, int64_t n, void* images, uint8_t* flags);

  // The same without the copy out of pinned memory: consume(first, images) is called on this
  // thread, in image order, once per download chunk (at most kChunkImages images), with images in a
  // pinned slot as they crossed PCIe. They are valid only during the call; the slot is refilled
  // kPinnedSlots batches later. generate() is this with a consumer that copies (and widens float16).
  using Consumer = std::function<void(int64_t first, const PinnedImages& images)>;
  void generate_each(const float* latents, int64_t n, const Consumer& consume);

  // Jobs one after another (Backend::generate_stream): each job's images in the pipeline's encoding
  // and their flags go to its target; batches never span two jobs, and the next job's batches are
  // queued while the last ones of the job before are still in flight, so the GPU does not drain
  // between jobs. done(job) is called on this thread, in order, once a job's images are all out.
  void generate_stream(const NextJob& next, const JobDone& done);

  // The device buffers of one slot (0 or 1), and one batch from that slot's latents into its float32
  // images on the compute stream (a graph replay when n == max_batch): the network alone, without
  // the float16 rounding of a bf16 download. For benchmarks and tests.
  float* device_latents(int slot) const { return d_latents_[slot]; }
  float* device_images(int slot) const { return d_images_[slot]; }
  void run_slot(int slot, int n) { run(slot, n, false); }

  // Event timestamps of each batch of the next generate() calls, in ms from that call's start.
  struct BatchTimes {
    int images;
    float upload_begin, upload_end, compute_begin, compute_end, download_begin, download_end;
  };
  void record_timeline(bool on) { timeline_on_ = on; }
  const std::vector<BatchTimes>& timeline() const { return timeline_; }

  static constexpr int kDeviceSlots = 2;
  static constexpr int kPinnedSlots = 3;    // batches queued ahead of the host copy + 1
  static constexpr int kChunkImages = 1024;  // images per download chunk (one event each)

 private:
  // Where a batch's latents come from: nb host latents (nb, nz) at `host`, or job images [first,
  // first + nb) of `recipe`, made on the GPU.
  struct BatchLatents {
    const float* host = nullptr;
    const LatentRecipe* recipe = nullptr;
    int64_t first = 0;
  };

  // The network on slot's batch of n; with for_download, also its images' scan (into d_flags_) and
  // their float16 or 8-bit form (into d_out_) where the run downloads them so.
  void forward(int slot, int n, bool for_download);
  // forward() on the compute stream, as a graph replay when n == max_batch (one graph per slot and
  // for_download).
  void run(int slot, int n, bool for_download);
  // What a batch's download reads: d_images_ or d_out_.
  const void* download_source(int slot) const;
  // Batch `sequence` of the pipeline's life (device slot sequence % 2, pinned slot sequence % 3): nb
  // latents from `latents` up (or drawn on the GPU), computed, downloaded into its pinned slot. Only
  // the host waits, and only for work two batches old.
  // marks: six events recorded at its steps' edges (the timeline), or null. images_to, flags_to:
  // page-locked memory that the batch's images and flags download into straight, or null for the
  // batch's pinned slot (which the host then copies from).
  void enqueue_batch(int64_t sequence, const BatchLatents& latents, int nb, cudaEvent_t* marks, void* images_to = nullptr,
                     uint8_t* flags_to = nullptr);
  // Waits for batch `sequence`'s last download chunk (a batch downloaded straight into its target).
  void wait_batch(int64_t sequence, int nb);
  // The chunks of batch `sequence`'s pinned slot, each as it lands, to `consume(first, chunk)`.
  void copy_out_batch(int64_t sequence, int nb, const std::function<void(int first, const PinnedImages&)>& consume);
  // A download chunk's images into host memory `out` (pipeline encoding; float16 widened to float32).
  void copy_chunk(const PinnedImages& chunk, void* out, uint8_t* flags);

  ModelSpec spec_;
  int latent_dim_;    // floats per latent
  int image_values_;  // floats per image
  ImageTransfer transfer_;
  size_t transfer_bytes_per_image_;
  bool round_half_;  // bf16: the host receives float16-rounded values, or pixels made from them
  int max_batch_;
  int device_;
  int chunks_;  // download chunks of a full batch
  std::unique_ptr<DeviceNetwork> net_;
  std::unique_ptr<ThreadShare> copier_;  // copies out of pinned memory (one thread moves ~4-10 GB/s)
  std::unique_ptr<DeviceLatents> drawn_;  // made at the first job of drawn latents
  cudaStream_t upload_ = nullptr, compute_ = nullptr, download_ = nullptr;
  void* act_[4] = {};
  float* d_latents_[kDeviceSlots] = {};
  float* d_images_[kDeviceSlots] = {};
  void* d_out_[kDeviceSlots] = {};       // float16 images or 8-bit pixels; not for ImageTransfer::Float32
  uint8_t* d_flags_[kDeviceSlots] = {};  // (max_batch): each image's scan flags
  float* h_latents_[kDeviceSlots] = {};  // pinned
  void* h_images_[kPinnedSlots] = {};    // pinned, transfer_bytes_per_image_ per image
  uint8_t* h_flags_[kPinnedSlots] = {};  // pinned, (max_batch)
  // uploaded_: the slot's pinned latents were read; computed_: its device latents were read and its
  // images written; images_read_: its device images were downloaded.
  cudaEvent_t uploaded_[kDeviceSlots] = {}, computed_[kDeviceSlots] = {}, images_read_[kDeviceSlots] = {};
  std::vector<cudaEvent_t> chunk_landed_[kPinnedSlots];  // per pinned slot, one per download chunk
  cudaGraphExec_t graph_[kDeviceSlots][2] = {};  // [slot][for_download]
  bool timeline_on_ = false;
  std::vector<BatchTimes> timeline_;
};

}  // namespace facegen
