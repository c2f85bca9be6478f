// backend.cpp: the device decision for --device auto|cuda|cpu (choose_device, see backend.hpp), the
// plain words for why no GPU is usable, and starting the backend on the chosen device.
//
// cpu always works; cuda is the user's explicit request, so no usable GPU is a fault of the
// environment (exit status 3) that names why; auto prefers a GPU and otherwise falls back to the
// CPU with a one-line notice saying why in plain words. The CPU computes in fp32 only.
//
// Also the host's generate_checked(), for the backends that make images in host memory.
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "generator/backend.hpp"
#include "common/errors.hpp"
#include "common/threads.hpp"
#include "generator/finite_check.hpp"

namespace facegen {

void Backend::generate_checked(const float* latents, int64_t n, const ImageTarget& out, int threads) {
  const int values = 4096 * out.channels;
  if (out.encoding == ImageEncoding::Float32) {
    float* images = static_cast<float*>(out.images);
    generate(latents, n, images);
    scan_images(images, n, values, threads, out.flags);
    return;
  }
  // 8-bit pixels: float32 images a piece at a time (12 MB for nc = 3), each scanned and converted.
  constexpr int64_t kPiece = 256;
  // The calling thread's piece, kept between calls; the converting threads reach it through `floats`.
  thread_local std::vector<float> piece;
  piece.resize(static_cast<size_t>(std::min(n, kPiece) * values));
  float* floats = piece.data();                                     // (piece, 64, 64, nc)
  unsigned char* pixels = static_cast<unsigned char*>(out.images);  // (n, 64, 64, 3)
  for (int64_t first = 0; first < n; first += kPiece) {
    const int64_t count = std::min(kPiece, n - first);
    generate(latents + first * out.latent_dim, count, floats);
    scan_images(floats, count, values, threads, out.flags + first);
    parallel_for(count, threads, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        image_to_rgb8(floats + i * values, out.channels, pixels + (first + i) * kRgb8ImageBytes);
    });
  }
}

HostBuffer plain_host_buffer(size_t bytes) {
  return HostBuffer(new char[std::max<size_t>(bytes, 1)], [](void* p) { delete[] static_cast<char*>(p); });
}

void Backend::generate_stream(const NextJob& next, const JobDone& done, int threads) {
  StreamJob job;
  while (next(job)) {
    if (job.recipe != nullptr) {
      throw std::logic_error("Backend::generate_stream: a recipe for a backend that does not draw latents");
    }
    generate_checked(job.latents, job.n, job.out, threads);
    done(job);
  }
}

namespace {

// The entries of CUDA_VISIBLE_DEVICES where it is set, else CUDA's numbers 0 .. k - 1 of the k device
// nodes dev/nvidiaN.
std::vector<std::string> visible_gpus(const std::string& dev) {
  std::vector<std::string> visible;
  if (const char* listed = std::getenv("CUDA_VISIBLE_DEVICES")) {
    std::string entry;
    for (const char* c = listed;; ++c) {
      if (*c == ',' || *c == '\0') {
        visible.push_back(entry);
        entry.clear();
        if (*c == '\0') break;
      } else {
        entry += *c;
      }
    }
  } else if (DIR* folder = ::opendir(dev.c_str())) {
    while (const dirent* node = ::readdir(folder)) {
      const std::string name = node->d_name;
      if (name.size() > 6 && name.compare(0, 6, "nvidia") == 0 &&
          name.find_first_not_of("0123456789", 6) == std::string::npos) {
        visible.push_back(std::to_string(visible.size()));  // CUDA's numbering: 0 .. count - 1
      }
    }
    ::closedir(folder);
  }
  return visible;
}

}  // namespace

int visible_gpu_count(const std::string& dev) { return static_cast<int>(visible_gpus(dev).size()); }

bool see_only_gpu(int index, const std::string& dev) {
  const std::vector<std::string> visible = visible_gpus(dev);
  if (visible.size() <= 1 || index < 0 || index >= static_cast<int>(visible.size()) || visible[index].empty()) {
    return false;
  }
  return ::setenv("CUDA_VISIBLE_DEVICES", visible[static_cast<size_t>(index)].c_str(), 1) == 0;
}

int usable_gpu_count(std::string* reason) {
  std::string runtime_says;
  const int count = cuda_device_count(&runtime_says);
  if (count > 0 || reason == nullptr) return count;
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const bool driver_loaded = ::access("/proc/driver/nvidia/version", F_OK) == 0;
  if (runtime_says.find("driver version is insufficient") != std::string::npos) {
    *reason = driver_loaded ? "the NVIDIA driver is older than the CUDA runtime this build needs; update the driver"
                            : "no NVIDIA driver is installed";
  } else if (visible != nullptr && (*visible == '\0' || std::string(visible) == "-1" ||
                                    std::string(visible) == "none" || std::string(visible) == "NoDevFiles")) {
    *reason = std::string("CUDA_VISIBLE_DEVICES='") + visible + "' hides every GPU";
  } else if (runtime_says.find("no CUDA-capable device") != std::string::npos ||
             runtime_says == "no CUDA device found") {
    *reason = driver_loaded ? "the NVIDIA driver sees no GPU" : "no NVIDIA GPU or driver was found";
  } else {
    *reason = runtime_says;  // already plain (a CUDA=0 build), or the runtime's own words
  }
  return 0;
}

std::string cpu_fallback_notice(const std::string& reason, int threads) {
  return "no NVIDIA GPU is usable here (" + reason + "); running on the CPU with " + std::to_string(threads) +
         (threads == 1 ? " thread" : " threads");
}

void throw_no_gpu(const std::string& reason) {
  throw std::runtime_error("--device cuda: no NVIDIA GPU is usable here (" + reason + ")");
}

const char* device_name(DeviceKind device) {
  switch (device) {
    case DeviceKind::Cuda: return "cuda";
    case DeviceKind::Cpu: return "cpu";
    case DeviceKind::Synthetic: return "synthetic";
    case DeviceKind::Auto: return "auto";
  }
  return "?";
}

DeviceChoice choose_device(const BackendOptions& requested, int local_rank) {
  DeviceChoice choice;
  choice.options = requested;
  BackendOptions& options = choice.options;
  const bool reduced_precision = options.precision != Precision::Fp32;
  if (options.device == DeviceKind::Synthetic) return choice;
  if (options.device == DeviceKind::Cpu) {
    if (reduced_precision)
      throw UserError("--precision tf32 and bf16 run on a CUDA GPU only; the CPU backend computes in fp32");
    return choice;
  }
  std::string reason;
  const int visible = usable_gpu_count(&reason);
  if (visible > 0) {
    options.device = DeviceKind::Cuda;
    if (options.cuda_device < 0) options.cuda_device = local_rank < 0 ? 0 : local_rank % visible;
    return choice;
  }
  if (options.device == DeviceKind::Cuda) throw_no_gpu(reason);
  options.device = DeviceKind::Cpu;
  options.precision = Precision::Fp32;
  choice.fell_back = true;
  choice.reason = reason;
  choice.was_reduced = reduced_precision;
  return choice;
}

std::string DeviceChoice::notice(int threads) const {
  if (!fell_back) return "";
  return cpu_fallback_notice(reason, threads) + (was_reduced ? " in fp32" : "");
}

std::unique_ptr<Backend> make_backend(const Network& net, const BackendOptions& options, std::string* notice) {
  const DeviceChoice choice = choose_device(options);
  if (notice) *notice = choice.notice(resolve_threads(choice.options.threads));
  switch (choice.options.device) {
    case DeviceKind::Synthetic: return make_synthetic_backend(choice.options);
    case DeviceKind::Cpu: return make_cpu_backend(net, choice.options);
    case DeviceKind::Cuda: return make_cuda_backend(net, choice.options);
    case DeviceKind::Auto: break;
  }
  throw std::logic_error("choose_device left the device undecided");
}

}  // namespace facegen
