// test_main.cpp: entry point of the GPU tests (build/facegen-gpu-tests).
//
// Without a usable CUDA device (no GPU, no driver, a CUDA=0 build) it runs no test case, prints
// "GPU tests SKIPPED: <reason>" and exits with 77, which tests/run_all.sh counts as skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "generator/backend.hpp"

int main(int argc, char** argv) {
  constexpr int kExitSkipped = 77;
  std::string why_none;
  if (facegen::cuda_device_count(&why_none) == 0) {
    std::printf("GPU tests SKIPPED: %s\n", why_none.c_str());
    return kExitSkipped;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
