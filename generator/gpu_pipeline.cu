// gpu_pipeline.cu: see gpu_pipeline.hpp.
#include "generator/gpu_pipeline.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "generator/network.hpp"
#include "kernels/cuda_check.cuh"

namespace facegen {
namespace {

// Large copies out of pinned memory run on several threads: one thread moves ~10 GB/s, less than
// the GPU produces images in the tensor-core modes.
void parallel_copy(void* dst, const void* src, size_t bytes) {
  constexpr size_t kPerThread = size_t{16} << 20;
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t parts = std::min<size_t>({(bytes + kPerThread - 1) / kPerThread, hw, 8});
  if (parts <= 1) {
    std::memcpy(dst, src, bytes);
    return;
  }
  std::vector<std::thread> threads;
  const size_t step = (bytes / parts + 63) & ~size_t{63};
  for (size_t p = 0; p < parts; ++p) {
    size_t begin = std::min(bytes, p * step), end = std::min(bytes, begin + step);
    threads.emplace_back([=] {
      std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin, end - begin);
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace

GpuPipeline::GpuPipeline(const float* network_floats, Precision precision, int max_batch, int device)
    : max_batch_(max_batch), device_(device) {
  if (max_batch < 1) throw std::invalid_argument("max_batch must be at least 1");
  CUDA_CHECK(cudaSetDevice(device));
  net_ = std::make_unique<DeviceNetwork>(network_floats, precision);
  CUDA_CHECK(cudaStreamCreateWithFlags(&upload_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&download_, cudaStreamNonBlocking));
  for (int s = 0; s < 4; ++s) CUDA_CHECK(cudaMalloc(&act_[s], net_->activation_bytes_per_image(s) * max_batch));
  const size_t z_bytes = sizeof(float) * kLatentDim * max_batch;
  const size_t img_bytes = sizeof(float) * kImageValues * max_batch;
  for (int k = 0; k < 2; ++k) {
    CUDA_CHECK(cudaMalloc(&d_latents_[k], z_bytes));
    CUDA_CHECK(cudaMalloc(&d_images_[k], img_bytes));
    CUDA_CHECK(cudaMallocHost(&h_latents_[k], z_bytes));
    CUDA_CHECK(cudaMallocHost(&h_images_[k], img_bytes));
    CUDA_CHECK(cudaEventCreateWithFlags(&uploaded_[k], cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&computed_[k], cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&downloaded_[k], cudaEventDisableTiming));
  }
}

GpuPipeline::~GpuPipeline() {
  // Teardown errors cannot be reported from a destructor; a broken device shows up on the next call.
  cudaSetDevice(device_);
  cudaDeviceSynchronize();
  for (int k = 0; k < 2; ++k) {
    if (graph_[k]) cudaGraphExecDestroy(graph_[k]);
    cudaFree(d_latents_[k]);
    cudaFree(d_images_[k]);
    cudaFreeHost(h_latents_[k]);
    cudaFreeHost(h_images_[k]);
    cudaEventDestroy(uploaded_[k]);
    cudaEventDestroy(computed_[k]);
    cudaEventDestroy(downloaded_[k]);
  }
  for (void* a : act_) cudaFree(a);
  cudaStreamDestroy(upload_);
  cudaStreamDestroy(compute_);
  cudaStreamDestroy(download_);
}

void GpuPipeline::run_slot(int slot, int n) {
  if (n < 1 || n > max_batch_) throw std::invalid_argument("batch size out of range");
  if (n < max_batch_) {
    net_->forward(d_latents_[slot], n, act_, d_images_[slot], compute_);
    return;
  }
  if (!graph_[slot]) {
    cudaGraph_t graph;
    CUDA_CHECK(cudaStreamBeginCapture(compute_, cudaStreamCaptureModeThreadLocal));
    net_->forward(d_latents_[slot], n, act_, d_images_[slot], compute_);
    CUDA_CHECK(cudaStreamEndCapture(compute_, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&graph_[slot], graph, 0));
    CUDA_CHECK(cudaGraphDestroy(graph));
  }
  CUDA_CHECK(cudaGraphLaunch(graph_[slot], compute_));
}

void GpuPipeline::generate(const float* latents, int64_t n, float* images) {
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
  auto mark = [&](int64_t b, int which, cudaStream_t s) {
    if (timeline_on_) CUDA_CHECK(cudaEventRecord(ev[6 * b + which], s));
  };
  auto batch_size = [&](int64_t b) { return static_cast<int>(std::min<int64_t>(max_batch_, n - b * max_batch_)); };

  for (int64_t b = 0; b <= batches; ++b) {
    if (b < batches) {
      const int slot = static_cast<int>(b % 2), nb = batch_size(b);
      // The slot's pinned latents were read by the upload of batch b-2; its device images by the
      // download of batch b-2 (waited below on the compute stream).
      CUDA_CHECK(cudaEventSynchronize(uploaded_[slot]));
      std::memcpy(h_latents_[slot], latents + b * max_batch_ * kLatentDim, sizeof(float) * kLatentDim * nb);
      mark(b, 0, upload_);
      CUDA_CHECK(cudaMemcpyAsync(d_latents_[slot], h_latents_[slot], sizeof(float) * kLatentDim * nb,
                                cudaMemcpyHostToDevice, upload_));
      mark(b, 1, upload_);
      CUDA_CHECK(cudaEventRecord(uploaded_[slot], upload_));
      CUDA_CHECK(cudaStreamWaitEvent(compute_, uploaded_[slot], 0));
      CUDA_CHECK(cudaStreamWaitEvent(compute_, downloaded_[slot], 0));
      mark(b, 2, compute_);
      run_slot(slot, nb);
      mark(b, 3, compute_);
      CUDA_CHECK(cudaEventRecord(computed_[slot], compute_));
      CUDA_CHECK(cudaStreamWaitEvent(download_, computed_[slot], 0));
      mark(b, 4, download_);
      CUDA_CHECK(cudaMemcpyAsync(h_images_[slot], d_images_[slot], sizeof(float) * kImageValues * nb,
                                cudaMemcpyDeviceToHost, download_));
      mark(b, 5, download_);
      CUDA_CHECK(cudaEventRecord(downloaded_[slot], download_));
    }
    if (b >= 1) {  // batch b-1's images out of pinned memory while the GPU works on batch b
      const int64_t p = b - 1;
      const int slot = static_cast<int>(p % 2);
      CUDA_CHECK(cudaEventSynchronize(downloaded_[slot]));
      parallel_copy(images + p * max_batch_ * kImageValues, h_images_[slot],
                    sizeof(float) * kImageValues * batch_size(p));
    }
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
