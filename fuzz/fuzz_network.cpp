// fuzz_network.cpp: libFuzzer target for the model loader and validator (load_network in
// generator/network.cpp).
//
// A real model is 20,549,132 bytes, far more than a fuzzer can mutate, so the input is read in one
// of three ways, chosen by the low two bits of byte 0:
//   0, 2: the rest of the input is the whole model file (any size: the size checks).
//   1:    a valid model (seeded random weights) with edits: byte 1, as a signed number, changes the
//         file's length by that many bytes; then records of 7 bytes overwrite float (3 bytes, modulo
//         the float count) with the value of the next 4 bytes (NaN, Inf, negative variances, ...).
//         The file is an in-memory file (memfd) opened by path, so the whole loader runs.
//   3:    the same edits on a model already in memory, checked by validate_network alone (what
//         load_network runs after reading): about twice as many inputs a second as mode 1.
// Acceptable outcomes: a loaded network, or a UserError. Any other exception, crash, leak or
// undefined behaviour is a finding. Oracle for the edited model: it must load exactly when its size
// is right and every edited value is finite (and, in a batch-norm variance, var + 1e-5 > 0).
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "generator/network.hpp"

namespace {

using facegen::kNetworkBytes;
using facegen::kNetworkFloats;

void write_all(int fd, const void* data, size_t size, off_t offset) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::pwrite(fd, bytes, size, offset);
    if (n <= 0) std::abort();
    bytes += n;
    size -= static_cast<size_t>(n);
    offset += n;
  }
}

std::string fd_path(int fd) { return "/proc/self/fd/" + std::to_string(fd); }

struct Fixture {
  facegen::Network base = facegen::make_random_network(1);
  facegen::Network edited = base;
  int raw_fd = ::memfd_create("fuzz-network-raw", MFD_CLOEXEC);
  int model_fd = ::memfd_create("fuzz-network-model", MFD_CLOEXEC);
  Fixture() {
    if (raw_fd < 0 || model_fd < 0) std::abort();
    write_all(model_fd, base.floats().data(), kNetworkBytes, 0);
  }
};

Fixture& fixture() {
  static Fixture* f = new Fixture;  // lives for the whole run; never freed, so no leak report
  return *f;
}

bool in_variance_block(int64_t index) {
  for (int stage = 0; stage < facegen::kNumStages; ++stage) {
    const int64_t first = fixture().base.batchnorm_offset(stage) + 3 * int64_t{facegen::kStageChannels[stage]};
    if (index >= first && index < first + facegen::kStageChannels[stage]) return true;
  }
  return false;
}

// Loads the file at `path`; returns whether it loaded. Only a UserError may come out.
bool load(const std::string& path, std::string* error) {
  try {
    facegen::Network net = facegen::load_network(path);
    if (static_cast<int64_t>(net.floats().size()) != kNetworkFloats) std::abort();
    return true;
  } catch (const facegen::UserError& e) {
    *error = e.what();
    if (error->empty()) std::abort();
    return false;
  }
}

void fuzz_raw(const uint8_t* data, size_t size) {
  Fixture& f = fixture();
  if (::ftruncate(f.raw_fd, 0) != 0) std::abort();
  write_all(f.raw_fd, data, size, 0);
  std::string error;
  if (load(fd_path(f.raw_fd), &error)) std::abort();  // no input this short is a whole model
}

void fuzz_edited(const uint8_t* data, size_t size, bool in_memory) {
  Fixture& f = fixture();
  const int length_change = size > 0 ? static_cast<int8_t>(data[0]) : 0;
  if (size > 0) {
    ++data;
    --size;
  }
  std::map<int64_t, float> edits;  // float index -> value, the last edit of an index wins
  for (; size >= 7; data += 7, size -= 7) {
    const int64_t index = (int64_t{data[0]} | int64_t{data[1]} << 8 | int64_t{data[2]} << 16) % kNetworkFloats;
    float value;
    std::memcpy(&value, data + 3, sizeof value);
    edits[index] = value;
  }
  if (in_memory && length_change == 0) {
    for (const auto& [index, value] : edits) f.edited.mutable_floats()[index] = value;
  } else {
    in_memory = false;
    for (const auto& [index, value] : edits) write_all(f.model_fd, &value, sizeof value, index * 4);
    if (length_change != 0 && ::ftruncate(f.model_fd, kNetworkBytes + length_change) != 0) std::abort();
  }

  bool expect_ok = length_change == 0;
  for (const auto& [index, value] : edits) {
    if (!std::isfinite(value)) expect_ok = false;
    if (in_variance_block(index) && !(value + facegen::kBatchNormEps > 0.0f)) expect_ok = false;
  }
  std::string error;
  bool ok = true;
  if (in_memory) {
    try {
      facegen::validate_network(f.edited, "fuzz.bin");
    } catch (const facegen::UserError& e) {
      ok = false;
      error = e.what();
    }
  } else {
    ok = load(fd_path(f.model_fd), &error);
  }
  if (ok != expect_ok) {
    std::fprintf(stderr, "length change %d, %zu edits: the loader %s, expected the opposite\n", length_change,
                 edits.size(), ok ? "accepted the model" : ("refused it: " + error).c_str());
    std::abort();
  }

  // Put the valid model back for the next input.
  if (in_memory) {
    for (const auto& edit : edits) f.edited.mutable_floats()[edit.first] = f.base.floats()[edit.first];
    return;
  }
  if (length_change != 0) {
    if (::ftruncate(f.model_fd, kNetworkBytes) != 0) std::abort();
    const int64_t tail = kNetworkBytes - 256;  // more than any length change removes
    write_all(f.model_fd, reinterpret_cast<const char*>(f.base.floats().data()) + tail, 256, tail);
  }
  for (const auto& edit : edits) {
    write_all(f.model_fd, f.base.floats().data() + edit.first, sizeof(float), edit.first * 4);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] & 1) {
    fuzz_edited(data + 1, size - 1, (data[0] & 2) != 0);
  } else {
    fuzz_raw(data + 1, size - 1);
  }
  return 0;
}
