// cuda_check.cuh: error checks for every CUDA runtime call and kernel launch.
//
// CUDA_CHECK(call) throws std::runtime_error naming the call, file, line and CUDA's message when
// `call` does not return cudaSuccess. CUDA_CHECK_LAUNCH() goes right after a kernel launch and
// reports a bad launch configuration the same way (cudaGetLastError). grid_blocks() sizes the
// one-dimensional grids of the grid-stride kernels.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace facegen {

[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* what, const char* file,
                                          int line) {
  throw std::runtime_error(std::string("CUDA error at ") + file + ":" + std::to_string(line) +
                           ": " + what + ": " + cudaGetErrorString(status));
}

// Blocks for a grid-stride loop over `count` items; capped, since each thread may take several.
inline unsigned grid_blocks(int64_t count, int threads_per_block) {
  const int64_t wanted = (count + threads_per_block - 1) / threads_per_block;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(wanted, int64_t{1} << 20)));
}

}  // namespace facegen

#define CUDA_CHECK(call)                                                     \
  do {                                                                       \
    const cudaError_t cuda_check_status_ = (call);                           \
    if (cuda_check_status_ != cudaSuccess)                                   \
      ::facegen::throw_cuda_error(cuda_check_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define CUDA_CHECK_LAUNCH()                                                  \
  do {                                                                       \
    const cudaError_t cuda_check_status_ = cudaGetLastError();               \
    if (cuda_check_status_ != cudaSuccess)                                   \
      ::facegen::throw_cuda_error(cuda_check_status_, "kernel launch", __FILE__, __LINE__); \
  } while (0)
