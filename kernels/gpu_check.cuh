// gpu_check.cuh: CUDA error checks that name the file and line. A failed call is a bug or a broken
// device, never a user's mistake, so it throws std::runtime_error with the internals.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace facegen {

inline void gpu_check(cudaError_t err, const char* what, const char* file, int line) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + what + ": " +
                             cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

}  // namespace facegen

#define GPU_CHECK(call) ::facegen::gpu_check((call), #call, __FILE__, __LINE__)
// After every kernel launch.
#define GPU_CHECK_LAUNCH() ::facegen::gpu_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
