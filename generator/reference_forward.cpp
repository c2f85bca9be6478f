// reference_forward.cpp: see reference_forward.hpp. Two activation buffers, swapped layer by layer.
#include "generator/reference_forward.hpp"

#include <algorithm>

#include "kernels/cpu/layers_cpu.hpp"

namespace facegen {

bool reference_forward(const Network& net, const float* latents, int64_t n, float* images, int threads,
                       const LayerObserver& observer) {
  const ModelSpec& spec = net.spec();
  auto stop_after = [&](const std::string& layer, const std::vector<float>& values) {
    return observer && !observer(layer, values);
  };
  std::vector<float> x(static_cast<size_t>(n * spec.proj_outputs()));  // (n, 4, 4, C0)
  projection_cpu(latents, n, spec.latent_dim, spec.proj_outputs(), net.proj_weight(), net.proj_bias(), x.data(),
                 threads);
  if (stop_after("proj", x)) return false;
  std::vector<float> y;
  for (int stage = 0; stage < spec.stages(); ++stage) {
    const BatchNormView bn = net.batchnorm(stage);
    const int size = ModelSpec::stage_size(stage);
    batchnorm_relu_cpu(x.data(), n * size * size, bn.channels, bn.beta, bn.gamma, bn.mean, bn.var, x.data(),
                       threads);
    if (stop_after("bn" + std::to_string(stage), x)) return false;
    const TConvView conv = net.tconv(stage);
    y.resize(static_cast<size_t>(n * 4 * size * size * conv.c_out));  // (n, 2h, 2h, c_out), all written
    tconv_cpu(x.data(), n, size, size, conv.c_in, conv.kernel_size, conv.weight, conv.bias, conv.c_out, y.data(),
              threads);
    x.swap(y);
    if (stop_after("tconv" + std::to_string(stage + 1), x)) return false;
  }
  tanh_cpu(x.data(), static_cast<int64_t>(x.size()), x.data(), threads);  // (n, size, size, nc)
  if (stop_after("tanh", x)) return false;
  std::copy(x.begin(), x.end(), images);
  return true;
}

}  // namespace facegen
