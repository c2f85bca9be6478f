// device_latents.cu: drawn latents on the GPU, with the host's values where the GPU is unsure (see
// device_latents.hpp).
#include "generator/device_latents.hpp"

#include <cstring>
#include <stdexcept>

#include "common/cuda_check.cuh"
#include "kernels/latent_draw.hpp"

namespace facegen {

DeviceLatents::DeviceLatents(int max_batch, int latent_dim, double agreement)
    : max_batch_(max_batch), latent_dim_(latent_dim), agreement_(agreement) {
  if (max_batch < 1 || latent_dim < 1 || int64_t{max_batch} * latent_dim >= (int64_t{1} << 32)) {
    throw std::invalid_argument("DeviceLatents: batches out of range");
  }
  const size_t values = size_t(max_batch) * latent_dim;
  for (Slot& slot : slots_) {
    slot.owner = this;
    CUDA_CHECK(cudaMallocHost(&slot.h_seeds, sizeof(uint64_t) * max_batch));
    CUDA_CHECK(cudaMalloc(&slot.d_seeds, sizeof(uint64_t) * max_batch));
    CUDA_CHECK(cudaMalloc(&slot.d_count, sizeof(unsigned)));
    CUDA_CHECK(cudaMallocHost(&slot.h_count, sizeof(unsigned)));
    CUDA_CHECK(cudaHostAlloc(&slot.where, sizeof(unsigned) * values, cudaHostAllocMapped));
    CUDA_CHECK(cudaHostAlloc(&slot.values, sizeof(float) * values, cudaHostAllocMapped));
    CUDA_CHECK(cudaHostGetDevicePointer(&slot.d_where, slot.where, 0));
    CUDA_CHECK(cudaHostGetDevicePointer(&slot.d_values, slot.values, 0));
    CUDA_CHECK(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming));
  }
}

DeviceLatents::~DeviceLatents() {
  // Teardown errors cannot be reported from a destructor; a broken device shows up on the next call.
  for (Slot& slot : slots_) {
    if (slot.done) cudaEventSynchronize(slot.done);
    cudaFreeHost(slot.h_seeds);
    cudaFree(slot.d_seeds);
    cudaFree(slot.d_count);
    cudaFreeHost(slot.h_count);
    cudaFreeHost(slot.where);
    cudaFreeHost(slot.values);
    cudaEventDestroy(slot.done);
  }
}

void DeviceLatents::enqueue(const LatentRecipe& recipe, int64_t first, int n, float* out, cudaStream_t stream) {
  if (n < 1 || n > max_batch_) throw std::invalid_argument("DeviceLatents: batch size out of range");
  Slot& slot = slots_[next_slot_];
  next_slot_ = (next_slot_ + 1) % kSlots;
  CUDA_CHECK(cudaEventSynchronize(slot.done));  // its batch kSlots back: seeds uploaded, values patched
  slot.recipe = recipe;
  LatentRecipe on_device = recipe;
  if (recipe.seeds != nullptr) {
    std::memcpy(slot.h_seeds, recipe.seeds + first, sizeof(uint64_t) * n);
    CUDA_CHECK(cudaMemcpyAsync(slot.d_seeds, slot.h_seeds, sizeof(uint64_t) * n, cudaMemcpyHostToDevice, stream));
    slot.recipe.seeds = slot.h_seeds;
    on_device.seeds = slot.d_seeds;
  } else {
    slot.recipe.first_image += first;
    on_device.first_image += first;
  }
  CUDA_CHECK(cudaMemsetAsync(slot.d_count, 0, sizeof(unsigned), stream));
  gpu::launch_draw_latents(on_device, n, latent_dim_, out, slot.d_count, slot.d_where, agreement_, stream);
  CUDA_CHECK(cudaMemcpyAsync(slot.h_count, slot.d_count, sizeof(unsigned), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaLaunchHostFunc(stream, make_on_host, &slot));
  gpu::launch_patch_latents(slot.d_count, slot.d_where, slot.d_values, out, stream);
  CUDA_CHECK(cudaEventRecord(slot.done, stream));
}

void CUDART_CB DeviceLatents::make_on_host(void* data) {
  Slot& slot = *static_cast<Slot*>(data);
  const int nz = slot.owner->latent_dim_;
  const unsigned count = *slot.h_count;
  for (unsigned k = 0; k < count; ++k) {
    const unsigned at = slot.where[k];
    slot.values[k] = recipe_value(slot.recipe, at / nz, static_cast<int>(at % nz));
  }
  slot.owner->made_on_host_ += count;
}

}  // namespace facegen
