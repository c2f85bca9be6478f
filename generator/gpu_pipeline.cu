// gpu_pipeline.cu: see gpu_pipeline.hpp.
#include "generator/gpu_pipeline.hpp"

#include <algorithm>
#include <deque>
#include <cstring>
#include <stdexcept>

#include "common/cuda_check.cuh"
#include "common/half_float.hpp"
#include "common/threads.hpp"
#include "generator/device_latents.hpp"
#include "generator/network.hpp"
#include "kernels/image_output.hpp"

namespace facegen {

ImageTransfer image_transfer(Precision precision, ImageEncoding encoding) {
  if (encoding == ImageEncoding::Rgb8) return ImageTransfer::Rgb8;
  return precision == Precision::Bf16 ? ImageTransfer::Float16 : ImageTransfer::Float32;
}

namespace {

size_t transfer_bytes_per_image(ImageTransfer transfer, int image_values) {
  switch (transfer) {
    case ImageTransfer::Float32: return sizeof(float) * image_values;
    case ImageTransfer::Float16: return sizeof(uint16_t) * image_values;
    case ImageTransfer::Rgb8: return static_cast<size_t>(kRgb8ImageBytes);
  }
  return 0;
}

gpu::ImageOutput finish_output(ImageTransfer transfer) {
  switch (transfer) {
    case ImageTransfer::Float32: return gpu::ImageOutput::None;
    case ImageTransfer::Float16: return gpu::ImageOutput::Float16;
    case ImageTransfer::Rgb8: return gpu::ImageOutput::Rgb8;
  }
  return gpu::ImageOutput::None;
}

}  // namespace

size_t PinnedImages::bytes() const { return transfer_bytes_per_image(format, values_per_image) * count; }

float PinnedImages::value(size_t i) const {
  if (format == ImageTransfer::Rgb8) throw std::logic_error("8-bit pixels are not float values");
  return format == ImageTransfer::Float16 ? half_to_float(static_cast<const uint16_t*>(data)[i])
                                          : static_cast<const float*>(data)[i];
}

void PinnedImages::to_floats(size_t begin, size_t end, float* out) const {
  if (format == ImageTransfer::Rgb8) throw std::logic_error("8-bit pixels are not float values");
  if (format == ImageTransfer::Float16) halves_to_floats(static_cast<const uint16_t*>(data) + begin, end - begin, out);
  else std::memcpy(out, static_cast<const float*>(data) + begin, sizeof(float) * (end - begin));
}

GpuPipeline::GpuPipeline(const float* network_floats, const ModelSpec& spec, Precision precision, int max_batch,
                         int device, ImageEncoding encoding)
    : spec_(spec), latent_dim_(spec.latent_dim), image_values_(spec.image_values()),
      transfer_(image_transfer(precision, encoding)), transfer_bytes_per_image_(transfer_bytes_per_image(transfer_, image_values_)),
      round_half_(precision == Precision::Bf16), max_batch_(max_batch), device_(device) {
  if (max_batch < 1) throw std::invalid_argument("max_batch must be at least 1");
  chunks_ = (max_batch + kChunkImages - 1) / kChunkImages;
  CUDA_CHECK(cudaSetDevice(device));
  net_ = std::make_unique<DeviceNetwork>(network_floats, spec, precision);
  copier_ = std::make_unique<ThreadShare>(std::min(8, available_cpus()));
  int least_priority = 0, greatest_priority = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority));
  CUDA_CHECK(cudaStreamCreateWithPriority(&upload_, cudaStreamNonBlocking, greatest_priority));
  CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&download_, cudaStreamNonBlocking));
  for (int s = 0; s < 4; ++s) {
    const size_t per_image = net_->activation_bytes_per_image(s);
    CUDA_CHECK(cudaMalloc(&act_[s], per_image * max_batch));
  }
  const size_t z_bytes = sizeof(float) * latent_dim_ * max_batch;
  const size_t img_bytes = sizeof(float) * image_values_ * max_batch;
  for (int k = 0; k < kDeviceSlots; ++k) {
    CUDA_CHECK(cudaMalloc(&d_latents_[k], z_bytes));
    CUDA_CHECK(cudaMalloc(&d_images_[k], img_bytes));
    if (transfer_ != ImageTransfer::Float32) CUDA_CHECK(cudaMalloc(&d_out_[k], transfer_bytes_per_image_ * max_batch));
    CUDA_CHECK(cudaMalloc(&d_flags_[k], max_batch));
    CUDA_CHECK(cudaMallocHost(&h_latents_[k], z_bytes));
    CUDA_CHECK(cudaEventCreateWithFlags(&uploaded_[k], cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&computed_[k], cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&images_read_[k], cudaEventDisableTiming));
  }
  for (int k = 0; k < kPinnedSlots; ++k) {
    CUDA_CHECK(cudaMallocHost(&h_images_[k], transfer_bytes_per_image_ * max_batch));
    CUDA_CHECK(cudaMallocHost(&h_flags_[k], max_batch));
    chunk_landed_[k].resize(chunks_);
    for (auto& e : chunk_landed_[k]) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
}

GpuPipeline::~GpuPipeline() {
  // Teardown errors cannot be reported from a destructor; a broken device shows up on the next call.
  cudaSetDevice(device_);
  cudaDeviceSynchronize();
  drawn_.reset();
  for (int k = 0; k < kDeviceSlots; ++k) {
    for (cudaGraphExec_t g : graph_[k])
      if (g) cudaGraphExecDestroy(g);
    cudaFree(d_latents_[k]);
    cudaFree(d_images_[k]);
    cudaFree(d_out_[k]);
    cudaFree(d_flags_[k]);
    cudaFreeHost(h_latents_[k]);
    cudaEventDestroy(uploaded_[k]);
    cudaEventDestroy(computed_[k]);
    cudaEventDestroy(images_read_[k]);
  }
  for (int k = 0; k < kPinnedSlots; ++k) {
    cudaFreeHost(h_images_[k]);
    cudaFreeHost(h_flags_[k]);
    for (auto e : chunk_landed_[k]) cudaEventDestroy(e);
  }
  for (void* a : act_) cudaFree(a);
  cudaStreamDestroy(upload_);
  cudaStreamDestroy(compute_);
  cudaStreamDestroy(download_);
}

void GpuPipeline::forward(int slot, int n, bool for_download) {
  net_->forward(d_latents_[slot], n, act_, d_images_[slot], compute_);
  if (for_download) {
    gpu::launch_finish_images(d_images_[slot], n, image_values_, finish_output(transfer_), round_half_, d_out_[slot],
                              d_flags_[slot], compute_);
  }
}

void GpuPipeline::run(int slot, int n, bool for_download) {
  if (n < 1 || n > max_batch_) throw std::invalid_argument("batch size out of range");
  if (n < max_batch_) {
    forward(slot, n, for_download);
    return;
  }
  cudaGraphExec_t& exec = graph_[slot][for_download];
  if (!exec) {
    cudaGraph_t graph;
    CUDA_CHECK(cudaStreamBeginCapture(compute_, cudaStreamCaptureModeThreadLocal));
    forward(slot, n, for_download);
    CUDA_CHECK(cudaStreamEndCapture(compute_, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_CHECK(cudaGraphDestroy(graph));
  }
  CUDA_CHECK(cudaGraphLaunch(exec, compute_));
}

const void* GpuPipeline::download_source(int slot) const {
  return transfer_ == ImageTransfer::Float32 ? static_cast<const void*>(d_images_[slot]) : d_out_[slot];
}

void GpuPipeline::generate(const float* latents, int64_t n, float* images) {
  if (transfer_ == ImageTransfer::Rgb8) throw std::logic_error("GpuPipeline::generate: this pipeline makes 8-bit pixels");
  // Pieces of 64K values (256 KB of float32): smaller ones cost more in wake-ups than they save.
  constexpr size_t kPiece = size_t{64} << 10;
  generate_each(latents, n, [&](int64_t first, const PinnedImages& chunk) {
    float* out = images + first * image_values_;
    const size_t values = chunk.values();
    copier_->parallel_for(static_cast<int64_t>((values + kPiece - 1) / kPiece), [&](int64_t p0, int64_t p1) {
      const size_t begin = p0 * kPiece, end = std::min(values, p1 * kPiece);
      chunk.to_floats(begin, end, out + begin);
    });
  });
}

void GpuPipeline::copy_chunk(const PinnedImages& chunk, void* out, uint8_t* flags) {
  // Pieces of 256 KB: smaller ones cost more in wake-ups than they save.
  constexpr size_t kPiece = size_t{256} << 10;
  const bool widen = transfer_ == ImageTransfer::Float16;
  std::memcpy(flags, chunk.flags, static_cast<size_t>(chunk.count));
  char* to = static_cast<char*>(out);
  const size_t bytes = chunk.bytes();
  copier_->parallel_for(static_cast<int64_t>((bytes + kPiece - 1) / kPiece), [&](int64_t p0, int64_t p1) {
    const size_t begin = p0 * kPiece, end = std::min(bytes, p1 * kPiece);
    if (widen) chunk.to_floats(begin / 2, end / 2, reinterpret_cast<float*>(to) + begin / 2);
    else std::memcpy(to + begin, static_cast<const char*>(chunk.data) + begin, end - begin);
  });
}

// Bytes of one image as the host receives it: float16 is widened to float32 as it is copied out.
static size_t host_bytes_per_image(ImageTransfer transfer, size_t transfer_bytes, int image_values) {
  return transfer == ImageTransfer::Float16 ? sizeof(float) * image_values : transfer_bytes;
}

void GpuPipeline::generate_checked(const float* latents, int64_t n, void* images, uint8_t* flags) {
  const size_t out_bytes_per_image = host_bytes_per_image(transfer_, transfer_bytes_per_image_, image_values_);
  generate_each(latents, n, [&](int64_t first, const PinnedImages& chunk) {
    copy_chunk(chunk, static_cast<char*>(images) + first * out_bytes_per_image, flags + first);
  });
}

void GpuPipeline::generate_stream(const NextJob& next, const JobDone& done) {
  CUDA_CHECK(cudaSetDevice(device_));
  const size_t out_bytes_per_image = host_bytes_per_image(transfer_, transfer_bytes_per_image_, image_values_);
  struct Live {
    StreamJob job;
    int64_t batches = 0;   // of the job
    int64_t enqueued = 0;  // batches enqueued so far
    int64_t copied = 0;    // batches copied out (or landed) so far
    bool direct = false;   // downloads land in the job's own page-locked target
  };
  struct Queued {
    size_t job;  // index into live, counted from the first job ever
    int64_t batch;
    int64_t sequence;
  };
  std::deque<Live> live;     // jobs not yet done, in order
  size_t live_base = 0;      // the job index of live.front()
  std::deque<Queued> queued;  // batches enqueued, not yet copied out
  int64_t sequence = 0;
  bool ended = false;
  // The next batch onto the GPU: the newest job's next one, or a new job's first.
  auto enqueue_one = [&]() {
    while (live.empty() || live.back().enqueued == live.back().batches) {
      if (ended) return;
      Live fresh;
      if (!next(fresh.job)) {
        ended = true;
        return;
      }
      if (fresh.job.out.encoding != (transfer_ == ImageTransfer::Rgb8 ? ImageEncoding::Rgb8 : ImageEncoding::Float32)) {
        throw std::logic_error("GpuPipeline: images asked for in another encoding than built for");
      }
      fresh.batches = (fresh.job.n + max_batch_ - 1) / max_batch_;
      // Images that cross PCIe as the host keeps them (not float16, which the host widens) land
      // straight in a page-locked target: no copy on the host.
      fresh.direct = transfer_ != ImageTransfer::Float16 && fresh.job.n > 0 && is_page_locked(fresh.job.out.images) &&
                     is_page_locked(fresh.job.out.flags);
      live.push_back(fresh);
    }
    Live& job = live.back();
    const int64_t b = job.enqueued++;
    const int nb = static_cast<int>(std::min<int64_t>(max_batch_, job.job.n - b * max_batch_));
    void* images_to = job.direct ? static_cast<char*>(job.job.out.images) + b * max_batch_ * out_bytes_per_image : nullptr;
    uint8_t* flags_to = job.direct ? job.job.out.flags + b * max_batch_ : nullptr;
    const BatchLatents latents = job.job.recipe != nullptr
                                     ? BatchLatents{nullptr, job.job.recipe, b * max_batch_}
                                     : BatchLatents{job.job.latents + b * max_batch_ * latent_dim_, nullptr, 0};
    enqueue_batch(sequence, latents, nb, nullptr, images_to, flags_to);
    queued.push_back({live_base + live.size() - 1, b, sequence++});
  };
  // Jobs at the front whose every batch is out (or that have none) are done, in order.
  auto finish_front = [&]() {
    while (!live.empty() && live.front().copied == live.front().batches &&
           live.front().enqueued == live.front().batches) {
      done(live.front().job);
      live.pop_front();
      ++live_base;
    }
  };
  constexpr int kAhead = kPinnedSlots - 1;  // batches queued beyond the one being copied out
  for (int k = 0; k < kAhead; ++k) enqueue_one();
  finish_front();
  while (!queued.empty()) {
    enqueue_one();  // its pinned slot held the batch before the front one, copied out already
    const Queued batch = queued.front();
    Live& job = live[batch.job - live_base];
    const int nb = static_cast<int>(std::min<int64_t>(max_batch_, job.job.n - batch.batch * max_batch_));
    char* images = static_cast<char*>(job.job.out.images);
    if (job.direct) {
      wait_batch(batch.sequence, nb);
    } else {
      copy_out_batch(batch.sequence, nb, [&](int first, const PinnedImages& chunk) {
        const int64_t image = batch.batch * max_batch_ + first;
        copy_chunk(chunk, images + image * out_bytes_per_image, job.job.out.flags + image);
      });
    }
    ++job.copied;
    queued.pop_front();
    finish_front();
  }
  finish_front();
}

bool is_page_locked(const void* p) {
  cudaPointerAttributes attributes;
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeHost;
}

void GpuPipeline::enqueue_batch(int64_t sequence, const BatchLatents& latents, int nb, cudaEvent_t* marks, void* images_to,
                                uint8_t* flags_to) {
  auto mark = [&](int which, cudaStream_t stream) {
    if (marks) CUDA_CHECK(cudaEventRecord(marks[which], stream));
  };
  const int slot = static_cast<int>(sequence % kDeviceSlots), pin = static_cast<int>(sequence % kPinnedSlots);
  // Pinned latents: read by the upload two batches back, which finished before the last batch's images did.
  CUDA_CHECK(cudaEventSynchronize(uploaded_[slot]));
  if (latents.host != nullptr) std::memcpy(h_latents_[slot], latents.host, sizeof(float) * latent_dim_ * nb);
  // Device latents: read by the projection two batches back (compute stream).
  CUDA_CHECK(cudaStreamWaitEvent(upload_, computed_[slot], 0));
  mark(0, upload_);
  if (latents.recipe != nullptr) {
    if (!drawn_) drawn_ = std::make_unique<DeviceLatents>(max_batch_, latent_dim_);
    drawn_->enqueue(*latents.recipe, latents.first, nb, d_latents_[slot], upload_);
  } else {
    CUDA_CHECK(cudaMemcpyAsync(d_latents_[slot], h_latents_[slot], sizeof(float) * latent_dim_ * nb,
                              cudaMemcpyHostToDevice, upload_));
  }
  mark(1, upload_);
  CUDA_CHECK(cudaEventRecord(uploaded_[slot], upload_));
  // Device images (and their float16 rounding): read by the download two batches back.
  CUDA_CHECK(cudaStreamWaitEvent(compute_, uploaded_[slot], 0));
  CUDA_CHECK(cudaStreamWaitEvent(compute_, images_read_[slot], 0));
  mark(2, compute_);
  run(slot, nb, true);
  const char* download_from = static_cast<const char*>(download_source(slot));
  mark(3, compute_);
  CUDA_CHECK(cudaEventRecord(computed_[slot], compute_));
  // Pinned images: three batches back, copied out by the host before it enqueued this one.
  CUDA_CHECK(cudaStreamWaitEvent(download_, computed_[slot], 0));
  mark(4, download_);
  CUDA_CHECK(cudaMemcpyAsync(flags_to ? flags_to : h_flags_[pin], d_flags_[slot], nb, cudaMemcpyDeviceToHost, download_));
  char* to = static_cast<char*>(images_to ? images_to : h_images_[pin]);
  for (int c = 0; c * kChunkImages < nb; ++c) {
    const size_t first = transfer_bytes_per_image_ * kChunkImages * c;
    const size_t bytes = transfer_bytes_per_image_ * std::min(kChunkImages, nb - c * kChunkImages);
    CUDA_CHECK(cudaMemcpyAsync(to + first, download_from + first, bytes, cudaMemcpyDeviceToHost, download_));
    CUDA_CHECK(cudaEventRecord(chunk_landed_[pin][c], download_));
  }
  mark(5, download_);
  CUDA_CHECK(cudaEventRecord(images_read_[slot], download_));
}

void GpuPipeline::wait_batch(int64_t sequence, int nb) {
  const int pin = static_cast<int>(sequence % kPinnedSlots);
  CUDA_CHECK(cudaEventSynchronize(chunk_landed_[pin][(nb - 1) / kChunkImages]));
}

void GpuPipeline::copy_out_batch(int64_t sequence, int nb,
                                 const std::function<void(int first, const PinnedImages&)>& consume) {
  const int pin = static_cast<int>(sequence % kPinnedSlots);
  for (int c = 0; c * kChunkImages < nb; ++c) {
    const int first = kChunkImages * c;
    CUDA_CHECK(cudaEventSynchronize(chunk_landed_[pin][c]));
    const PinnedImages chunk{static_cast<const char*>(h_images_[pin]) + transfer_bytes_per_image_ * first, transfer_,
                             std::min(kChunkImages, nb - first), image_values_, h_flags_[pin] + first};
    consume(first, chunk);
  }
}

void GpuPipeline::generate_each(const float* latents, int64_t n, const Consumer& consume) {
  CUDA_CHECK(cudaSetDevice(device_));
  const int64_t batches = (n + max_batch_ - 1) / max_batch_;
  // Timeline events exist only when asked for (benchmarks); the batches themselves allocate nothing.
  std::vector<cudaEvent_t> ev;
  cudaEvent_t start = nullptr;
  if (timeline_on_) {
    ev.resize(6 * batches);
    for (auto& e : ev) CUDA_CHECK(cudaEventCreate(&e));
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventRecord(start, upload_));
  }
  auto batch_size = [&](int64_t b) { return static_cast<int>(std::min<int64_t>(max_batch_, n - b * max_batch_)); };
  // Batch b is the pipeline's batch b of this call: its slots are b % 2 and b % 3, as in a stream.
  auto enqueue = [&](int64_t b) {
    enqueue_batch(b, BatchLatents{latents + b * max_batch_ * latent_dim_, nullptr, 0}, batch_size(b),
                  timeline_on_ ? &ev[6 * b] : nullptr);
  };
  constexpr int64_t kAhead = kPinnedSlots - 1;  // batches queued beyond the one being copied out
  for (int64_t b = 0; b < std::min(kAhead, batches); ++b) enqueue(b);
  for (int64_t b = 0; b < batches; ++b) {
    if (b + kAhead < batches) enqueue(b + kAhead);  // its pinned slot held batch b-1, copied out already
    copy_out_batch(b, batch_size(b), [&](int first, const PinnedImages& chunk) { consume(b * max_batch_ + first, chunk); });
  }
  if (timeline_on_) {
    CUDA_CHECK(cudaStreamSynchronize(download_));
    timeline_.assign(batches, BatchTimes{});
    for (int64_t b = 0; b < batches; ++b) {
      float t[6];
      for (int k = 0; k < 6; ++k) CUDA_CHECK(cudaEventElapsedTime(&t[k], start, ev[6 * b + k]));
      timeline_[b] = {batch_size(b), t[0], t[1], t[2], t[3], t[4], t[5]};
    }
    for (auto& e : ev) cudaEventDestroy(e);
    cudaEventDestroy(start);
  }
}

}  // namespace facegen
