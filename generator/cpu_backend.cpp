// cpu_backend.cpp: the CPU backend, the generator's forward pass through the CPU layers.
//
// Latents (n, 100) are processed kChunk images at a time through two ping-pong activation buffers
// of (kChunk, 32, 32, 64) floats each, so memory stays bounded for any n. The last transposed
// convolution writes straight into the caller's images (n, 64, 64, 3), where tanh runs in place.
#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "generator/backend.hpp"
#include "generator/network.hpp"
#include "kernels/layers_cpu.hpp"
#include "common/threads.hpp"

namespace facegen {

namespace {

constexpr int64_t kChunk = 32;  // images per pass: enough work items for every thread

int64_t largest_activation() {  // floats per image, over the projection and all stage inputs
  int64_t most = kProjOutputs;
  for (int s = 0; s < kNumStages; ++s)
    most = std::max<int64_t>(most, int64_t(kStageSize[s]) * kStageSize[s] * kStageChannels[s]);
  return most;
}

class CpuBackend : public Backend {
 public:
  CpuBackend(const Network& net, int threads, std::atomic<int64_t>* images_done)
      : net_(net),
        images_done_(images_done),
        threads_(resolve_threads(threads)),
        buffer_a_(kChunk * largest_activation()),
        buffer_b_(kChunk * largest_activation()) {}

  std::string describe() const override {
    return "CPU, " + std::to_string(threads_) + (threads_ == 1 ? " thread" : " threads");
  }

  void generate(const float* latents, int64_t n, float* images) override {
    for (int64_t first = 0; first < n; first += kChunk) {
      const int64_t batch = std::min(kChunk, n - first);
      run_network(latents + first * kLatentDim, batch, images + first * kImageValues);
      if (images_done_) images_done_->fetch_add(batch, std::memory_order_relaxed);
    }
  }

 private:
  // latents (batch, 100) -> images (batch, 64, 64, 3)
  void run_network(const float* latents, int64_t batch, float* images) {
    float* x = buffer_a_.data();     // stage input (batch, size, size, channels)
    float* next = buffer_b_.data();  // stage output
    projection_cpu(latents, batch, kLatentDim, kProjOutputs, net_.proj_weight(), net_.proj_bias(),
                   x, threads_);
    for (int s = 0; s < kNumStages; ++s) {
      const int size = kStageSize[s];
      const BatchNormView bn = net_.batchnorm(s);
      batchnorm_relu_cpu(x, batch * size * size, bn.channels, bn.beta, bn.gamma, bn.mean, bn.var,
                         x, threads_);
      const TConvView tc = net_.tconv(s);
      float* out = s + 1 == kNumStages ? images : next;
      tconv_cpu(x, batch, size, size, tc.c_in, tc.weight, tc.bias, tc.c_out, out, threads_);
      std::swap(x, next);
    }
    tanh_cpu(images, batch * kImageValues, images, threads_);
  }

  Network net_;
  std::atomic<int64_t>* images_done_;  // progress, may be null
  int threads_;
  std::vector<float> buffer_a_;
  std::vector<float> buffer_b_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const Network& net, const BackendOptions& options) {
  return std::make_unique<CpuBackend>(net, options.threads, options.images_done);
}

}  // namespace facegen
