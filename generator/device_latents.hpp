// device_latents.hpp: a batch's drawn latents made on the GPU (StreamJob::recipe), bit for bit the
// host's.
//
// On the caller's stream, per batch: the batch's seeds up (--seeds only; 8 bytes an image), the draw
// kernel into the batch's device latents (kernels/latent_draw.hpp), the count of the values the GPU
// could not vouch for down, a host function (cudaLaunchHostFunc, on CUDA's own thread) that makes
// those few values with glibc as recipe_value does, and a kernel that patches them in. Nothing waits
// on the host: the stream orders it all before whatever the caller queues after it, and the caller's
// thread makes no latent value. The indices and the host's values cross in mapped page-locked
// memory, room for a whole batch, so that any count fits.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "common/latent_draw.hpp"

namespace facegen {

class DeviceLatents {
 public:
  // agreement: the detector's bound (kDrawAgreement; tests make it large, to send many values to the host).
  DeviceLatents(int max_batch, int latent_dim, double agreement = kDrawAgreement);
  ~DeviceLatents();
  DeviceLatents(const DeviceLatents&) = delete;
  DeviceLatents& operator=(const DeviceLatents&) = delete;

  // Job images [first, first + n) of `recipe` (host memory; its seeds are read now) into out (n, nz),
  // device memory, on `stream`. n <= max_batch. Waits only for the batch kSlots calls back to be done.
  void enqueue(const LatentRecipe& recipe, int64_t first, int n, float* out, cudaStream_t stream);

  // Values the host made so far (the GPU could not vouch for them), once the stream got that far.
  int64_t made_on_host() const { return made_on_host_.load(); }

  static constexpr int kSlots = 2;

 private:
  struct Slot {
    DeviceLatents* owner = nullptr;
    uint64_t* h_seeds = nullptr;   // page-locked (max_batch): the batch's seeds (--seeds)
    uint64_t* d_seeds = nullptr;   // (max_batch)
    unsigned* d_count = nullptr;   // the batch's uncertain values
    unsigned* h_count = nullptr;   // page-locked: its copy, for the host function
    unsigned* where = nullptr;     // mapped (max_batch * nz): their indices, image * nz + value
    float* values = nullptr;       // mapped (max_batch * nz): the host's values of them
    unsigned* d_where = nullptr;   // the device's addresses of the mapped two
    float* d_values = nullptr;
    cudaEvent_t done = nullptr;    // the slot's last batch patched: all of the above free again
    LatentRecipe recipe;           // the batch's as the host function reads it (seeds: h_seeds)
  };
  // The host function: the uncertain values of slot's batch, as the host makes them.
  static void CUDART_CB make_on_host(void* slot);

  int max_batch_;
  int latent_dim_;  // nz
  double agreement_;
  Slot slots_[kSlots];
  int next_slot_ = 0;
  std::atomic<int64_t> made_on_host_{0};
};

}  // namespace facegen
