// layer_errors.hpp: a float32 GPU network's |error| against float64, layer by layer and for the whole
// network, for the GPU tests and build/facegen-bench alike.
//
// Layer by layer, each layer of DeviceNetwork gets the float64 pass's own input, rounded to float32 as
// the GPU stores activations: z for the projection, then each layer's float64 output (after its batch
// norm and ReLU) for the next; its output is compared with the float64 layer on that same input. The
// whole network is DeviceNetwork::forward from z against the float64 forward pass without any
// rounding between layers (tests/gpu/reference.hpp). Layer outputs, per image:
//   0 projection + bn + relu (4, 4, 8g)   1..3 tconv1-3 + bn + relu (8..32, .., 4g..g)   4 tconv4 + tanh (64, 64, nc)
// fp32 networks only (FFMA or tensor cores): their activations are float32.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

#include "common/cuda_check.cuh"
#include "common/model_spec.hpp"
#include "kernels/generator_gpu.hpp"
#include "tests/gpu/reference.hpp"

namespace facegen {

struct ErrorStats {
  double worst = 0, sum = 0;
  int64_t count = 0, not_finite = 0;
  void add(double got, double want) {
    const double e = std::fabs(got - want);
    if (!std::isfinite(got)) ++not_finite;
    else worst = std::max(worst, e);
    sum += std::isfinite(e) ? e : 0;
    ++count;
  }
  double mean() const { return count ? sum / static_cast<double>(count) : 0; }
};

struct NetworkErrors {
  ErrorStats layer[kGpuLayers];
  ErrorStats network;
};

// Values per image of layer l's output.
inline size_t layer_values(const ModelSpec& spec, int l) {
  if (l == kGpuLayers - 1) return static_cast<size_t>(spec.image_values());
  const size_t h = ModelSpec::stage_size(l);
  return h * h * spec.stage_channels(l);
}

// The float64 side for n images: each layer's float32 input and float64 output, and the images of the
// float64 forward pass.
struct LayerReference {
  ModelSpec spec;
  int n = 0;
  std::vector<float> input[kGpuLayers];    // (n, values of the layer's input); input[0] is z
  std::vector<double> output[kGpuLayers];  // (n, layer_values(l))
  std::vector<double> images;              // (n, image values)
};

// z: n latents of spec.latent_dim. Runs on all cores.
inline LayerReference make_layer_reference(const std::vector<float>& net, const ModelSpec& spec, const float* z, int n) {
  LayerReference r;
  r.spec = spec;
  r.n = n;
  const reference::Offsets o(spec);
  r.input[0].assign(z, z + size_t(n) * spec.latent_dim);
  for (int l = 0; l < kGpuLayers; ++l) {
    r.output[l].resize(size_t(n) * layer_values(spec, l));
    if (l > 0) r.input[l].resize(size_t(n) * layer_values(spec, l - 1));
  }
  r.images.resize(size_t(n) * spec.image_values());
  auto one_image = [&](int img) {
    const float* zi = z + size_t(img) * spec.latent_dim;
    const size_t k_out = spec.proj_outputs();
    std::vector<double> x(k_out);
    for (size_t j = 0; j < k_out; ++j) {
      double s = net[o.proj_bias + j];
      for (int k = 0; k < spec.latent_dim; ++k) s += static_cast<double>(zi[k]) * net[o.proj_weight + int64_t{k} * k_out + j];
      x[j] = s;
    }
    reference::bn_relu(x, &net[o.bn[0]], spec.stage_channels(0));
    for (int l = 0;; ++l) {
      std::copy(x.begin(), x.end(), r.output[l].begin() + img * x.size());
      if (l == kGpuLayers - 1) break;
      std::vector<double> in(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        const float f = static_cast<float>(x[i]);
        r.input[l + 1][img * x.size() + i] = f;
        in[i] = f;
      }
      const int s = l;  // tconv stage
      x = reference::tconv(in, ModelSpec::stage_size(s), spec.stage_channels(s), &net[o.tconv_weight[s]],
                           &net[o.tconv_bias[s]], spec.stage_channels(s + 1), spec.kernel_size);
      if (s < 3) reference::bn_relu(x, &net[o.bn[s + 1]], spec.stage_channels(s + 1));
      else
        for (double& v : x) v = std::tanh(v);
    }
    const std::vector<double> image = reference::forward(net, zi, spec);
    std::copy(image.begin(), image.end(), r.images.begin() + img * image.size());
  };
  const int threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int img = t; img < n; img += threads) one_image(img);
    });
  for (auto& th : pool) th.join();
  return r;
}

// Device buffers poisoned with NaN (so a value not written counts as not finite), freed together.
class PoisonedBuffers {
 public:
  PoisonedBuffers() = default;
  PoisonedBuffers(const PoisonedBuffers&) = delete;
  PoisonedBuffers& operator=(const PoisonedBuffers&) = delete;
  ~PoisonedBuffers() {
    for (void* p : buffers_) cudaFree(p);  // no error can be reported from here
  }
  void* make(size_t bytes) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, bytes));
    buffers_.push_back(p);
    CUDA_CHECK(cudaMemset(p, 0xff, bytes));
    return p;
  }
  void* upload(const std::vector<float>& v) {
    void* p = make(v.size() * 4);
    CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice));
    return p;
  }

 private:
  std::vector<void*> buffers_;
};

// Adds every float of got_device (want.size() of them) against want to stats; kept: the floats, if
// not null.
inline void add_errors(const void* got_device, const std::vector<double>& want, ErrorStats& stats,
                       std::vector<float>* kept = nullptr) {
  std::vector<float> got(want.size());
  CUDA_CHECK(cudaMemcpy(got.data(), got_device, got.size() * 4, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < got.size(); ++i) stats.add(got[i], want[i]);
  if (kept) *kept = std::move(got);
}

// dn's images from ref's latents (DeviceNetwork::forward) against the float64 forward pass; any
// precision (its images are float32 on the device). images: the images themselves, if not null.
inline ErrorStats measure_network_errors(const DeviceNetwork& dn, const LayerReference& ref,
                                         std::vector<float>* images_out = nullptr) {
  PoisonedBuffers b;
  const int n = ref.n;
  void* act[4];
  for (int s = 0; s < 4; ++s) act[s] = b.make(dn.activation_bytes_per_image(s) * n);
  float* images = static_cast<float*>(b.make(size_t(n) * ref.spec.image_values() * 4));
  dn.forward(static_cast<const float*>(b.upload(ref.input[0])), n, act, images, nullptr);
  ErrorStats e;
  add_errors(images, ref.images, e, images_out);
  return e;
}

// dn's errors on ref's images, layer by layer and whole (dn: an fp32 network of ref.spec);
// network_images: the whole network's images, if not null.
inline NetworkErrors measure_layer_errors(const DeviceNetwork& dn, const LayerReference& ref,
                                          std::vector<float>* network_images = nullptr) {
  PoisonedBuffers b;
  const int n = ref.n;
  NetworkErrors e;
  void* act0 = b.make(dn.activation_bytes_per_image(0) * n);
  dn.projection(static_cast<const float*>(b.upload(ref.input[0])), n, act0, nullptr);
  add_errors(act0, ref.output[0], e.layer[0]);
  for (int s = 0; s < 3; ++s) {
    void* out = b.make(dn.activation_bytes_per_image(s + 1) * n);
    dn.tconv(s, b.upload(ref.input[s + 1]), n, out, nullptr);
    add_errors(out, ref.output[s + 1], e.layer[s + 1]);
  }
  float* images = static_cast<float*>(b.make(size_t(n) * ref.spec.image_values() * 4));
  dn.output_layer(b.upload(ref.input[4]), n, images, nullptr);
  add_errors(images, ref.output[4], e.layer[4]);
  e.network = measure_network_errors(dn, ref, network_images);
  return e;
}

}  // namespace facegen
