// backend.hpp: the engines that turn latents into images, on the CPU or on a CUDA GPU.
//
// A backend takes any number of latents (n, nz) in host memory and fills images (n, 64, 64, nc),
// C fastest, in host memory (nz, nc: the network's ModelSpec). It splits the work into batches of its own choosing; each image
// depends only on its own latent, so results are the same for any batch size or split.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/latent_draw.hpp"
#include "common/precision.hpp"
#include "formats/image_run.hpp"
#include "generator/network.hpp"

namespace facegen {

// Synthetic is not the network: images made from the latents by a cheap formula, for testing and
// measuring the output side at speeds the CPU backend cannot reach (see synthetic_backend.cpp).
enum class DeviceKind { Auto, Cuda, Cpu, Synthetic };
const char* device_name(DeviceKind device);  // "auto", "cuda", "cpu", "synthetic": the summary's words

struct BackendOptions {
  DeviceKind device = DeviceKind::Auto;
  int cuda_device = -1;   // -1: let the backend choose (device 0, or the MPI layer's choice)
  int max_batch = 512;    // images per GPU batch
  int threads = 0;        // CPU threads; 0: all hardware threads
  Precision precision = Precision::Fp32;
  // Where the CPU backend adds each pass of images as it finishes it (progress display); optional.
  std::atomic<int64_t>* images_done = nullptr;
  // What generate_checked() will be asked for: the CUDA backend then makes 8-bit pixels on the GPU.
  ImageEncoding images = ImageEncoding::Float32;
};

// Where generate_checked() puts n images: their float32 values (n, 64, 64, nc) or 8-bit RGB pixels
// (n, 64, 64, 3) (image_run.hpp), and each image's scan flags (n) (generator/finite_check.hpp).
struct ImageTarget {
  ImageEncoding encoding;
  void* images;
  uint8_t* flags;
  int latent_dim;  // nz
  int channels;    // nc
};

// Host memory that a backend delivers images into, with its own way of being freed.
using HostBuffer = std::unique_ptr<void, void (*)(void*)>;
HostBuffer plain_host_buffer(size_t bytes);  // new[]: pages become resident as they are written

// One job of a stream of jobs: n latents (n, nz) in, their images and scan flags out. For a backend
// that draws latents (Backend::draws_latents) a job may instead give their recipe (latents null).
struct StreamJob {
  const float* latents = nullptr;
  int64_t n = 0;
  ImageTarget out{};
  const LatentRecipe* recipe = nullptr;  // drawn latents (common/latent_draw.hpp): the backend makes them
};
// next(job) fills in the stream's next job, or returns false where the stream ends; done(job) is told
// once every image of a job is in its target, in the order the jobs came.
using NextJob = std::function<bool(StreamJob& job)>;
using JobDone = std::function<void(const StreamJob& job)>;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string describe() const = 0;  // e.g. "CPU, 2 threads" or "CUDA 0: NVIDIA H200 (0000:1a:00.0)"
  virtual void generate(const float* latents, int64_t n, float* images) = 0;
  // What the drivers call: the images in out's encoding, and their scan. Here: generate(), then the
  // scan and the conversion to 8-bit on the host on `threads` threads (<= 0: every CPU), a piece at a
  // time; the CUDA backend does both on the GPU. Any n.
  virtual void generate_checked(const float* latents, int64_t n, const ImageTarget& out, int threads);
  // Jobs one after another as next() gives them (see StreamJob). The CUDA backend keeps the GPU busy
  // from one job to the next, with the next job's batches queued before the last one's images are
  // out; here, generate_checked() a job at a time.
  virtual void generate_stream(const NextJob& next, const JobDone& done, int threads);
  // Memory for the targets of generate_stream's jobs: the CUDA backend gives page-locked memory, which
  // its downloads land in straight from the GPU (no copy on the host); by default plain memory.
  virtual HostBuffer allocate_host(size_t bytes) { return plain_host_buffer(bytes); }
  // Whether generate_stream takes jobs of drawn latents by their recipe (StreamJob::recipe) and makes
  // the latents itself, bit for bit the host's: the CUDA backend, on the GPU; not by default.
  virtual bool draws_latents() const { return false; }
};

std::unique_ptr<Backend> make_cpu_backend(const Network& net, const BackendOptions& options);
std::unique_ptr<Backend> make_synthetic_backend(const BackendOptions& options);

// Number of usable CUDA devices; 0 when there is none or no driver, with the reason in *why_none.
int cuda_device_count(std::string* why_none);

// Throws std::runtime_error when CUDA cannot be used (built without CUDA, no device, no driver).
std::unique_ptr<Backend> make_cuda_backend(const Network& net, const BackendOptions& options);

// Creates the CUDA context of `device` (-1: device 0) on a thread of its own, so that the work that needs
// no GPU (reading the model and the latents, checking the outputs) goes on beside it: a context takes
// 0.2-0.5 s, most of a small job. wait() returns the seconds the caller waited for it; the
// destructor waits too. Nothing happens where CUDA is unavailable (the backend reports that itself).
class EarlyCudaContext {
 public:
  explicit EarlyCudaContext(int device);
  ~EarlyCudaContext();
  EarlyCudaContext(const EarlyCudaContext&) = delete;
  EarlyCudaContext& operator=(const EarlyCudaContext&) = delete;
  double wait();

 private:
  struct Creation;
  std::unique_ptr<Creation> creation_;
};

// Makes GPU `index` (counted among those this process may see) the only one CUDA will see, before
// CUDA starts: a context then costs one device's start-up, not every device's (0.28 s with one GPU
// visible against 0.45 s with two and 1.0 s with four, on the H200 hosts). The GPUs are counted
// without CUDA: the entries of CUDA_VISIBLE_DEVICES where it is set, else the device nodes
// `dev`/nvidiaN. Changes nothing (and returns false) where one GPU or none is visible, where `index`
// is not one of them (CUDA then says so itself). Call it before CUDA starts: CUDA reads the variable once.
bool see_only_gpu(int index, const std::string& dev = "/dev");
// The GPUs see_only_gpu() counts (0 where it cannot count them).
int visible_gpu_count(const std::string& dev = "/dev");

// Usable CUDA devices, with the reason for none in plain words ("no NVIDIA driver is installed",
// "CUDA_VISIBLE_DEVICES hides every GPU", ...), for the notice and the error below.
int usable_gpu_count(std::string* reason);
// The one notice of both drivers when --device auto runs on the CPU:
// "no NVIDIA GPU is usable here (REASON); running on the CPU with N threads".
std::string cpu_fallback_notice(const std::string& reason, int threads);
// The fault of --device cuda where no GPU is usable (exit status 3), naming the reason.
[[noreturn]] void throw_no_gpu(const std::string& reason);

// The one decision of which device computes, for a single process and for each rank of an MPI job:
// cpu always works (in fp32 only: tf32 and bf16 there are the user's error); cuda is the user's
// explicit request, so no usable GPU is a fault (throw_no_gpu) that names why; auto prefers a GPU
// and otherwise falls back to the CPU in fp32 with a one-line notice saying why. A process that is
// local rank `local_rank` of its node takes GPU local_rank mod the visible GPUs, unless
// options.cuda_device names one.
struct DeviceChoice {
  BackendOptions options;  // device Cuda (with cuda_device set), Cpu or Synthetic; never Auto
  bool fell_back = false;  // auto found no usable GPU
  std::string reason;      // why, in plain words
  bool was_reduced = false;  // tf32 or bf16 was asked for, so the notice says "in fp32"
  // cpu_fallback_notice() for a fallback on `threads` CPU threads, else empty.
  std::string notice(int threads) const;
};
DeviceChoice choose_device(const BackendOptions& requested, int local_rank = 0);

// The backend of choose_device(options), with its notice on `notice`.
std::unique_ptr<Backend> make_backend(const Network& net, const BackendOptions& options,
                                      std::string* notice);

}  // namespace facegen
