// cuda_unavailable.cpp: the CUDA entry points of a build made with CUDA=0 (no nvcc, CPU only).
//
// Reports no device, with the reason, so --device auto falls back to the CPU and --device cuda
// says why it cannot run.
#include <memory>
#include <stdexcept>
#include <string>

#include "generator/backend.hpp"

namespace facegen {

namespace {
constexpr const char* kNoCuda = "this facegen was built without CUDA: make CUDA=0";
}  // namespace

int cuda_device_count(std::string* why_none) {
  if (why_none) *why_none = kNoCuda;
  return 0;
}

struct EarlyCudaContext::Creation {};
EarlyCudaContext::EarlyCudaContext(int) {}
EarlyCudaContext::~EarlyCudaContext() = default;
double EarlyCudaContext::wait() { return 0; }

std::unique_ptr<Backend> make_cuda_backend(const Network&, const BackendOptions&) {
  throw std::runtime_error(std::string("cannot use a CUDA GPU: ") + kNoCuda);
}

}  // namespace facegen
