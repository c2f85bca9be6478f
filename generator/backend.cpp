// backend.cpp: picks the backend for --device auto|cuda|cpu.
//
// cpu always works; cuda is the user's explicit request, so no usable GPU is their error
// (UserError) and names why; auto prefers a GPU and otherwise falls back to the CPU with a
// one-line notice saying why. The CPU computes in fp32 only.
#include <memory>
#include <string>

#include "generator/backend.hpp"
#include "common/errors.hpp"

namespace facegen {

std::unique_ptr<Backend> make_backend(const Network& net, const BackendOptions& options,
                                      std::string* notice) {
  if (notice) notice->clear();
  const bool reduced_precision = options.precision != Precision::Fp32;
  if (options.device == DeviceKind::Synthetic) return make_synthetic_backend(options);
  if (options.device == DeviceKind::Cpu) {
    if (reduced_precision)
      throw UserError("--precision tf32 and bf16 run on a CUDA GPU only; the CPU backend computes in fp32");
    return make_cpu_backend(net, options);
  }

  std::string why_none;
  const bool have_gpu = cuda_device_count(&why_none) > 0;
  if (options.device == DeviceKind::Cuda) {
    if (!have_gpu)
      throw UserError("--device cuda was requested but no CUDA GPU is usable: " + why_none);
    return make_cuda_backend(net, options);
  }
  if (have_gpu) return make_cuda_backend(net, options);
  if (notice)
    *notice = "no usable CUDA GPU (" + why_none + "); running on the CPU" + (reduced_precision ? " in fp32" : "");
  return make_cpu_backend(net, options);
}

}  // namespace facegen
