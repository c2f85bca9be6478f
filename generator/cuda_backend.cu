// cuda_backend.cu: the CUDA backend, the generator's forward pass on one GPU.
//
// The work is done by GpuPipeline (generator/gpu_pipeline.hpp): weights uploaded and rearranged
// once for the chosen precision (phase-GEMM matrices, batch norms folded into epilogues), buffers
// allocated once, uploads, compute and downloads on three streams so batch b's images download
// while batch b+1 computes. Every image's arithmetic is independent of max_batch and of its place
// in the batch, so split runs (MPI ranks) give the same bytes as one run. The images' scan for NaN and
// Inf, and their 8-bit pixels where every format is 8-bit, are made on the GPU too, and so are drawn
// latents (--random, --seeds), given as recipes (generator/device_latents.hpp), unless
// FACEGEN_GPU_LATENTS=host asks for them to be made on the host and uploaded (for comparisons).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "generator/backend.hpp"
#include "common/errors.hpp"
#include "generator/network.hpp"
#include "common/cuda_check.cuh"
#include "generator/gpu_pipeline.hpp"

namespace facegen {

namespace {

class CudaBackend : public Backend {
 public:
  CudaBackend(const Network& net, int device, int max_batch, Precision precision, ImageEncoding images)
      : encoding_(images), draws_latents_(latents_on_device()) {
    CUDA_CHECK(cudaSetDevice(device));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    char bus_id[32] = {};
    CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device));
    description_ = "CUDA " + std::to_string(device) + ": " + prop.name + " (" + bus_id + "), " + precision_name(precision);
    pipeline_ = std::make_unique<GpuPipeline>(net.floats().data(), net.spec(), precision, max_batch, device, images);
  }

  std::string describe() const override { return description_; }
  bool draws_latents() const override { return draws_latents_; }

  void generate(const float* latents, int64_t n, float* images) override {
    pipeline_->generate(latents, n, images);
  }

  // The scan, and the 8-bit pixels where asked for, on the GPU (gpu_pipeline.hpp).
  void generate_checked(const float* latents, int64_t n, const ImageTarget& out, int) override {
    if (out.encoding != encoding_) throw std::logic_error("CudaBackend: images asked for in another encoding than built for");
    pipeline_->generate_checked(latents, n, out.images, out.flags);
  }

  // One job after another with no drain of the GPU between them (gpu_pipeline.hpp).
  void generate_stream(const NextJob& next, const JobDone& done, int) override { pipeline_->generate_stream(next, done); }

  // Page-locked, so that the pipeline's downloads land in it straight from the GPU; plain memory
  // where the system has no more to lock (the pipeline then copies, as into any memory).
  HostBuffer allocate_host(size_t bytes) override {
    void* pinned = nullptr;
    if (cudaHostAlloc(&pinned, std::max<size_t>(bytes, 1), cudaHostAllocDefault) != cudaSuccess) {
      cudaGetLastError();
      return plain_host_buffer(bytes);
    }
    return HostBuffer(pinned, [](void* p) { cudaFreeHost(p); });
  }

 private:
  // FACEGEN_GPU_LATENTS: device (the default) or host.
  static bool latents_on_device() {
    const char* where = std::getenv("FACEGEN_GPU_LATENTS");
    if (where == nullptr || std::string(where) == "device") return true;
    if (std::string(where) == "host") return false;
    throw std::invalid_argument(std::string("FACEGEN_GPU_LATENTS must be device or host, not '") + where + "'");
  }

  ImageEncoding encoding_;
  bool draws_latents_;
  std::string description_;
  std::unique_ptr<GpuPipeline> pipeline_;
};

}  // namespace

struct EarlyCudaContext::Creation {
  std::thread thread;
};

EarlyCudaContext::EarlyCudaContext(int device) : creation_(std::make_unique<Creation>()) {
  creation_->thread = std::thread([device] {
    // Errors (no driver, no such device) are left for the backend's own calls, which report them.
    if (cudaSetDevice(device < 0 ? 0 : device) == cudaSuccess) cudaFree(nullptr);
    cudaGetLastError();
  });
}

EarlyCudaContext::~EarlyCudaContext() { wait(); }

double EarlyCudaContext::wait() {
  if (!creation_->thread.joinable()) return 0;
  const auto start = std::chrono::steady_clock::now();
  creation_->thread.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int cuda_device_count(std::string* why_none) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // leave no error behind for the next CUDA call
    if (why_none) *why_none = cudaGetErrorString(status);
    return 0;
  }
  if (count == 0 && why_none) *why_none = "no CUDA device found";
  return count;
}

std::unique_ptr<Backend> make_cuda_backend(const Network& net, const BackendOptions& options) {
  std::string why_none;
  const int count = cuda_device_count(&why_none);
  if (count == 0) throw std::runtime_error("cannot use a CUDA GPU: " + why_none);
  const int device = options.cuda_device == -1 ? 0 : options.cuda_device;
  if (device < 0 || device >= count)
    throw UserError("CUDA device " + std::to_string(options.cuda_device) +
                    " was requested, but this machine has " + std::to_string(count) +
                    " usable CUDA device(s), numbered from 0");
  if (options.max_batch < 1)
    throw UserError("the GPU batch size must be at least 1 image, got " +
                    std::to_string(options.max_batch));
  return std::make_unique<CudaBackend>(net, device, options.max_batch, options.precision, options.images);
}

}  // namespace facegen
