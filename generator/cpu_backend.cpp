// cpu_backend.cpp: the CPU backend, the generator's forward pass through the fast CPU layers
// (kernels/cpu/phase_gemm_cpu.hpp): batch norms folded into the layer before them, ReLU and tanh
// applied as results are stored, the vector width picked for this CPU when the backend is made.
//
// Latents (n, nz) are processed kChunk images at a time through one padded activation buffer per
// stage input, (kChunk, size + 2, size + 2, channels), whose zero borders are never written; the
// last layer writes straight into the caller's images (n, size, size, nc). The projection and tconv1
// run on the whole chunk (small maps, large weights: many rows per weight panel); tconv2 to tconvS
// and on (S = the spec's stages()), whose maps are large, run a few images at a time, so that a group's activations stay in the
// cache from one layer to the next (measured: about 8% more images per CPU-second than whole
// chunks on this 2-CPU machine). Every shape comes from the
// network's layers, so any network of the family (common/model_spec.hpp) runs here.
#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "common/threads.hpp"
#include "generator/backend.hpp"
#include "generator/network.hpp"
#include "kernels/cpu/phase_gemm_cpu.hpp"

namespace facegen {

namespace {

constexpr int64_t kChunk = 16;  // images per pass of the projection and tconv1
constexpr int kGroupFrom = 1;    // the stage from which images go through in groups

// Images per group: 2, more with more threads so that each layer call still has about 8 tiles per
// thread (the last layer of a 64x64 network makes 32 tiles per image).
int64_t group_images(int threads) { return std::clamp<int64_t>(threads / 4, 2, kChunk); }

class CpuBackend : public Backend {
 public:
  CpuBackend(const Network& net, int threads, CpuIsa isa, std::atomic<int64_t>* images_done)
      : images_done_(images_done), latent_dim_(net.spec().latent_dim), stages_(net.spec().stages()),
        pool_(threads), group_(group_images(pool_.size())) {
    projection_ =
        pack_projection(net.proj_weight(), net.proj_bias(), latent_dim_, net.batchnorm(0), isa);
    for (int s = 0; s < stages_; ++s) {
      const bool last = s + 1 == stages_;
      const BatchNormView next_bn = last ? BatchNormView{} : net.batchnorm(s + 1);
      const TConvView tc = net.tconv(s);
      tconv_[s] = pack_tconv(tc, last ? nullptr : &next_bn, isa);
      const int64_t images = s <= kGroupFrom ? kChunk : group_;
      stage_in_[s].assign(images * padded_floats(tc.size_in, tc.c_in), 0.0f);
    }
    image_values_ = int64_t(4) * tconv_[stages_ - 1].size_in * tconv_[stages_ - 1].size_in * tconv_[stages_ - 1].c_out;
  }

  std::string describe() const override {
    return "CPU (" + cpu_isa_name(projection_.isa) + "), " + std::to_string(pool_.size()) +
           (pool_.size() == 1 ? " thread" : " threads");
  }

  void generate(const float* latents, int64_t n, float* images) override {
    for (int64_t first = 0; first < n; first += kChunk) {
      const int64_t batch = std::min(kChunk, n - first);
      run_network(latents + first * latent_dim_, batch, images + first * image_values_);
      if (images_done_) images_done_->fetch_add(batch, std::memory_order_relaxed);
    }
  }

 private:
  // latents (batch, nz) -> images (batch, size, size, nc)
  void run_network(const float* latents, int64_t batch, float* images) {
    projection_relu_fast(projection_, latents, batch, stage_in_[0].data(), pool_);
    for (int s = 0; s < kGroupFrom; ++s)
      tconv_relu_fast(tconv_[s], stage_in_[s].data(), batch, stage_in_[s + 1].data(), false,
                      pool_);
    const int64_t group_in = padded_floats(tconv_[kGroupFrom].size_in, tconv_[kGroupFrom].c_in);
    for (int64_t first = 0; first < batch; first += group_) {
      const int64_t count = std::min(group_, batch - first);
      // Later stages' buffers hold the group only, from their start.
      const float* in = stage_in_[kGroupFrom].data() + first * group_in;
      for (int s = kGroupFrom; s + 1 < stages_; ++s) {
        const bool planar_out = s + 2 == stages_;  // the last layer reads channel-planar maps
        tconv_relu_fast(tconv_[s], in, count, stage_in_[s + 1].data(), planar_out, pool_);
        in = stage_in_[s + 1].data();
      }
      tconv_tanh_fast(tconv_[stages_ - 1], in, count, images + first * image_values_, pool_);
    }
  }

  std::atomic<int64_t>* images_done_;  // progress, may be null
  int latent_dim_;                     // nz
  int stages_;                         // transposed convolutions: 3, 4 or 5
  int64_t image_values_ = 0;           // size * size * nc
  ThreadShare pool_;  // started once, shared by every layer of every pass
  int64_t group_;    // images per group from stage kGroupFrom on
  PackedLayer projection_;
  PackedLayer tconv_[kMaxStages];
  // (images, size + 2, size + 2, channels) with a zero border, images = kChunk up to stage
  // kGroupFrom and group_ after it; the last (group_, size + 2, g, size + 2), channel-planar.
  std::vector<float> stage_in_[kMaxStages];
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const Network& net, const BackendOptions& options) {
  return std::make_unique<CpuBackend>(net, options.threads, best_cpu_isa(),
                                      options.images_done);
}

}  // namespace facegen
