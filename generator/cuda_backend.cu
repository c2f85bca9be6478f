// cuda_backend.cu: the CUDA backend, the generator's forward pass on one GPU.
//
// The network is uploaded once (the file as is, plus each tconv weight reordered to the
// (5, 5, c_in, c_out) layout tconv_cuda reads). A StreamSlot owns one stream with everything a
// batch needs: device latents (max_batch, 100), two ping-pong activation buffers of
// (max_batch, 32, 32, 64) floats, and pinned host staging for latents and images (max_batch, 64,
// 64, 3). generate() walks the latents in batches of max_batch through one slot; run_network() only
// enqueues work on the slot's stream, so more slots (streams) can later overlap copies and compute.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "generator/backend.hpp"
#include "generator/errors.hpp"
#include "generator/network.hpp"
#include "kernels/cuda_check.cuh"
#include "kernels/layers_cuda.hpp"

namespace facegen {

namespace {

// Owns count floats of device memory.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(int64_t count) {
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), sizeof(float) * count));
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept : ptr_(std::exchange(other.ptr_, nullptr)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(ptr_, other.ptr_);
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);  // no throwing from a destructor; a failure here changes nothing
  }
  float* get() const { return ptr_; }

 private:
  float* ptr_ = nullptr;
};

// Owns count floats of page-locked host memory, so copies run asynchronously at full speed.
class PinnedBuffer {
 public:
  explicit PinnedBuffer(int64_t count) {
    CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&ptr_), sizeof(float) * count));
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (ptr_) cudaFreeHost(ptr_);
  }
  float* get() const { return ptr_; }

 private:
  float* ptr_ = nullptr;
};

class Stream {
 public:
  Stream() { CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() { cudaStreamDestroy(stream_); }
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

int64_t largest_activation() {  // floats per image, over the projection and all stage inputs
  int64_t most = kProjOutputs;
  for (int s = 0; s < kNumStages; ++s)
    most = std::max<int64_t>(most, int64_t(kStageSize[s]) * kStageSize[s] * kStageChannels[s]);
  return most;
}

// Everything one stream needs to run batches of up to max_batch images on its own.
struct StreamSlot {
  explicit StreamSlot(int64_t max_batch)
      : latents(max_batch * kLatentDim),
        act_a(max_batch * largest_activation()),
        act_b(max_batch * largest_activation()),
        images(max_batch * kImageValues),
        host_latents(max_batch * kLatentDim),
        host_images(max_batch * kImageValues) {}

  Stream stream;
  DeviceBuffer latents;  // (max_batch, 100)
  DeviceBuffer act_a;    // (max_batch, h, w, c) stage inputs and outputs, ping-pong
  DeviceBuffer act_b;
  DeviceBuffer images;   // (max_batch, 64, 64, 3)
  PinnedBuffer host_latents;
  PinnedBuffer host_images;
};

class CudaBackend : public Backend {
 public:
  CudaBackend(const Network& net, int device, int max_batch)
      : device_(device), max_batch_(max_batch) {
    CUDA_CHECK(cudaSetDevice(device_));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    char bus_id[32] = {};
    CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device_));
    description_ = "CUDA " + std::to_string(device_) + ": " + prop.name + " (" + bus_id + ")";
    upload_network(net);
    slot_ = std::make_unique<StreamSlot>(max_batch_);
  }

  ~CudaBackend() override {
    cudaSetDevice(device_);  // buffers are freed on their own device
    slot_.reset();
  }

  std::string describe() const override { return description_; }

  void generate(const float* latents, int64_t n, float* images) override {
    CUDA_CHECK(cudaSetDevice(device_));  // the caller's thread may have another device current
    StreamSlot& slot = *slot_;
    for (int64_t first = 0; first < n; first += max_batch_) {
      const int64_t batch = std::min<int64_t>(max_batch_, n - first);
      const size_t latent_bytes = sizeof(float) * batch * kLatentDim;
      const size_t image_bytes = sizeof(float) * batch * kImageValues;
      std::memcpy(slot.host_latents.get(), latents + first * kLatentDim, latent_bytes);
      CUDA_CHECK(cudaMemcpyAsync(slot.latents.get(), slot.host_latents.get(), latent_bytes,
                                 cudaMemcpyHostToDevice, slot.stream.get()));
      run_network(slot, batch);
      CUDA_CHECK(cudaMemcpyAsync(slot.host_images.get(), slot.images.get(), image_bytes,
                                 cudaMemcpyDeviceToHost, slot.stream.get()));
      CUDA_CHECK(cudaStreamSynchronize(slot.stream.get()));
      std::memcpy(images + first * kImageValues, slot.host_images.get(), image_bytes);
    }
  }

 private:
  void upload_network(const Network& net) {
    const std::vector<float>& floats = net.floats();
    file_ = DeviceBuffer(static_cast<int64_t>(floats.size()));
    CUDA_CHECK(cudaMemcpy(file_.get(), floats.data(), sizeof(float) * floats.size(),
                          cudaMemcpyHostToDevice));
    for (int s = 0; s < kNumStages; ++s) {
      const TConvView tc = net.tconv(s);
      const int64_t count = int64_t(kTaps) * kTaps * tc.c_in * tc.c_out;
      std::vector<float> reordered(count);
      tconv_weight_for_cuda(tc.weight, tc.c_in, tc.c_out, reordered.data());
      tconv_weight_t_[s] = DeviceBuffer(count);
      CUDA_CHECK(cudaMemcpy(tconv_weight_t_[s].get(), reordered.data(), sizeof(float) * count,
                            cudaMemcpyHostToDevice));
    }
  }

  // Device address of the block at `offset` floats into the uploaded file.
  const float* in_file(int64_t offset) const { return file_.get() + offset; }

  // Enqueues the forward pass of slot.latents (batch, 100) -> slot.images (batch, 64, 64, 3).
  void run_network(StreamSlot& slot, int64_t batch) const {
    cudaStream_t stream = slot.stream.get();
    float* x = slot.act_a.get();     // stage input (batch, size, size, channels)
    float* next = slot.act_b.get();  // stage output
    projection_cuda(slot.latents.get(), batch, kLatentDim, kProjOutputs,
                    in_file(Network::proj_weight_offset()), in_file(Network::proj_bias_offset()),
                    x, stream);
    for (int s = 0; s < kNumStages; ++s) {
      const int size = kStageSize[s];
      const int channels = kStageChannels[s];
      const float* beta = in_file(Network::batchnorm_offset(s));  // gamma, mean, var follow
      batchnorm_relu_cuda(x, batch * size * size, channels, beta, beta + channels,
                          beta + 2 * channels, beta + 3 * channels, x, stream);
      float* out = s + 1 == kNumStages ? slot.images.get() : next;
      tconv_cuda(x, batch, size, size, channels, tconv_weight_t_[s].get(),
                 in_file(Network::tconv_bias_offset(s)), kStageChannels[s + 1], out, stream);
      std::swap(x, next);
    }
    tanh_cuda(slot.images.get(), batch * kImageValues, slot.images.get(), stream);
  }

  int device_;
  int max_batch_;
  std::string description_;
  DeviceBuffer file_;                          // the network file, as is
  DeviceBuffer tconv_weight_t_[kNumStages];  // (5, 5, c_in, c_out) each
  std::unique_ptr<StreamSlot> slot_;
};

}  // namespace

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
  return std::make_unique<CudaBackend>(net, device, options.max_batch);
}

}  // namespace facegen
