// test_gpu_visibility.cpp: see_only_gpu narrows CUDA_VISIBLE_DEVICES to one GPU, counting the GPUs
// without CUDA (the variable's entries, else the device nodes), and changes nothing where one or none
// is visible or the index is not one of them.
#include <doctest/doctest.h>

#include <stdlib.h>

#include <fstream>
#include <string>

#include "generator/backend.hpp"
#include "tests/test_support.hpp"

namespace {

// CUDA_VISIBLE_DEVICES as it was, put back at the end of the test.
struct SavedVisible {
  bool had;
  std::string value;
  SavedVisible() : had(std::getenv("CUDA_VISIBLE_DEVICES") != nullptr), value(had ? std::getenv("CUDA_VISIBLE_DEVICES") : "") {}
  ~SavedVisible() {
    if (had) setenv("CUDA_VISIBLE_DEVICES", value.c_str(), 1);
    else unsetenv("CUDA_VISIBLE_DEVICES");
  }
};

std::string visible() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return v ? v : "(unset)";
}

}  // namespace

TEST_CASE("see_only_gpu: one GPU of those listed or found, else nothing changes") {
  SavedVisible saved;
  facegen_test::TempDir dev;
  for (const char* node : {"nvidia0", "nvidia3", "nvidia7", "nvidiactl", "nvidia-uvm", "nvidia-modeset", "nvme0"}) {
    std::ofstream(dev.path + "/" + node) << "";
  }
  unsetenv("CUDA_VISIBLE_DEVICES");
  CHECK(facegen::visible_gpu_count(dev.path) == 3);  // nvidia0, nvidia3, nvidia7: CUDA numbers them 0, 1, 2
  CHECK(facegen::see_only_gpu(2, dev.path));
  CHECK(visible() == "2");
  // Now one is visible: nothing more to narrow.
  CHECK_FALSE(facegen::see_only_gpu(0, dev.path));
  CHECK(visible() == "2");

  setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa,GPU-bbbb,GPU-cccc", 1);
  CHECK(facegen::visible_gpu_count(dev.path) == 3);
  CHECK(facegen::see_only_gpu(1, dev.path));
  CHECK(visible() == "GPU-bbbb");

  setenv("CUDA_VISIBLE_DEVICES", "4,5", 1);
  CHECK_FALSE(facegen::see_only_gpu(2, dev.path));  // not one of them: CUDA says so itself
  CHECK_FALSE(facegen::see_only_gpu(-1, dev.path));
  CHECK(visible() == "4,5");
  setenv("CUDA_VISIBLE_DEVICES", "", 1);  // every GPU hidden
  CHECK_FALSE(facegen::see_only_gpu(0, dev.path));
  CHECK(visible().empty());

  unsetenv("CUDA_VISIBLE_DEVICES");
  facegen_test::TempDir empty;
  CHECK(facegen::visible_gpu_count(empty.path) == 0);
  CHECK_FALSE(facegen::see_only_gpu(0, empty.path));
  CHECK(visible() == "(unset)");
}
