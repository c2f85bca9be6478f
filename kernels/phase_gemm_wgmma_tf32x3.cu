// phase_gemm_wgmma_tf32x3.cu: tensor maps and launches of the float32 phase GEMMs on Hopper's tensor
// cores (kernels/phase_gemm_wgmma_tf32x3.cuh).
//
// Tile shapes per stage (BM = 64 x consumer warpgroups, BN, stages of the ring; shared memory: stages
// of BM + 2 BN rows of 128 bytes, and the totals, BM x BN floats):
//   tconv1 (512 -> 256, 4x4):   Large 128 x 128, 3 stages (208 KB); Small 64 x 128, 4 stages (192 KB)
//   tconv2 (256 -> 128, 8x8):   the same
//   tconv3 (128 -> 64, 16x16):  Large 256 x 64 (one image), 3 stages (208 KB); Small 128 x 64, 4 (160 KB)
// one block per SM each, and a producer warpgroup beside the consumers (which take most of its
// registers: WgmmaTf32x3Shape). Schedule 0 splits a warpgroup's columns into two slices of BN / 2
// (m64n64 and m64n32 wgmma), schedule 1 issues one slice of BN; Small and Large differ in their
// warpgroups only. Those forms run the same groups in the same order for every output: the same bits.
// Schedule 2, for the benchmark, is schedule 0 with an FADD every two k steps: other bits.
// Registers (ptxas, sm_90a, no spills): 232 a consumer thread where two consumers claim them, 112
// where four do, 160-174 for the Small tiles' one consumer.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/cuda_check.cuh"
#include "kernels/phase_gemm_wgmma.hpp"
#include "kernels/phase_gemm_wgmma_tf32x3.cuh"
#include "kernels/wgmma_tensor_maps.hpp"

namespace facegen {
namespace gpu {
namespace {

template <int S, bool Small, int SCHEDULE> struct Tf32x3Stage;
template <bool Small, int SCHEDULE> struct Tf32x3Stage<0, Small, SCHEDULE> {
  static constexpr int C_IN = 512, C_OUT = 256, H = 4, BN = 128, CONSUMERS = Small ? 1 : 2, STAGES = Small ? 4 : 3;
  static constexpr int SLICE_N = SCHEDULE == 1 ? BN : BN / 2, REBASE = SCHEDULE == 2 ? 2 : 1;
};
template <bool Small, int SCHEDULE> struct Tf32x3Stage<1, Small, SCHEDULE> {
  static constexpr int C_IN = 256, C_OUT = 128, H = 8, BN = 128, CONSUMERS = Small ? 1 : 2, STAGES = Small ? 4 : 3;
  static constexpr int SLICE_N = SCHEDULE == 1 ? BN : BN / 2, REBASE = SCHEDULE == 2 ? 2 : 1;
};
template <bool Small, int SCHEDULE> struct Tf32x3Stage<2, Small, SCHEDULE> {
  // (Schedule 2's Large tiles: two consumers, whose two steps of A parts do not fit in four's registers.)
  static constexpr int C_IN = 128, C_OUT = 64, H = 16, BN = 64, CONSUMERS = Small || SCHEDULE == 2 ? 2 : 4;
  static constexpr int STAGES = Small ? 4 : 3;
  static constexpr int SLICE_N = SCHEDULE == 1 ? BN : BN / 2, REBASE = SCHEDULE == 2 ? 2 : 1;
};
template <int S, bool Small, int SCHEDULE, class C = Tf32x3Stage<S, Small, SCHEDULE>>
using Tf32x3StageShape = WgmmaTf32x3Shape<C::C_IN, C::C_OUT, C::H, C::BN, C::CONSUMERS, C::STAGES, C::SLICE_N, C::REBASE>;

template <int S, bool Small, int SCHEDULE>
auto tf32x3_kernel_of() {
  using C = Tf32x3Stage<S, Small, SCHEDULE>;
  return tconv_phase_wgmma_tf32x3<C::C_IN, C::C_OUT, C::H, C::BN, C::CONSUMERS, C::STAGES, C::SLICE_N, C::REBASE>;
}

template <int S>
void make_maps(int ksize, const float* split_weight, PhaseWeightMaps* maps) {
  using C = Tf32x3Stage<S, false, 0>;
  using Shape = Tf32x3StageShape<S, false, 0>;
  static_assert(Tf32x3Stage<S, true, 0>::BN == C::BN && Tf32x3Stage<S, false, 1>::BN == C::BN &&
                    Tf32x3Stage<S, true, 1>::BN == C::BN,
                "one weight box for every form of a stage");
  maps->ksize = ksize;
  for (int z = 0; z < 4; ++z) {
    const int k_total = phase_k_total(z, C::C_IN, ksize);
    const float* b = split_weight + 2 * static_cast<int64_t>(phase_k_offset(z, C::C_IN, ksize)) * C::C_OUT;
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k_total), 2 * C::C_OUT};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k_total) * sizeof(float)};
    const cuuint32_t box[2] = {Shape::BK, Shape::BN};
    encode(&maps->b[z], Math::Tf32x3, 2, b, dims, strides, box);
  }
}

// Raises the shared-memory limit, and where the consumers claim the producer's registers (setmaxnreg)
// checks that the kernel starts with the registers the claim counts on: a claim the block's pool
// cannot meet would wait forever.
template <int S, bool Small, int SCHEDULE>
void configure_one() {
  using Shape = Tf32x3StageShape<S, Small, SCHEDULE>;
  const auto kernel = tf32x3_kernel_of<S, Small, SCHEDULE>();
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Shape::kSmemBytes));
  cudaFuncAttributes attributes{};
  CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  if (Shape::kReallocates && attributes.numRegs != Shape::kLaunchRegs)
    throw std::logic_error("the float32 wgmma kernel of tconv" + std::to_string(S + 1) + " starts with " +
                           std::to_string(attributes.numRegs) + " registers a thread, its register claim counts on " +
                           std::to_string(Shape::kLaunchRegs));
}

template <int S>
void configure_stage() {
  configure_one<S, false, 0>();
  configure_one<S, true, 0>();
  configure_one<S, false, 1>();
  configure_one<S, true, 1>();
  configure_one<S, false, 2>();
  configure_one<S, true, 2>();
}

template <int S, bool Small, int SCHEDULE>
void launch(const float* in, int n, const PhaseWeightMaps& weights, const float* scale, const float* shift, float* out,
            cudaStream_t stream) {
  using C = Tf32x3Stage<S, Small, SCHEDULE>;
  using Shape = Tf32x3StageShape<S, Small, SCHEDULE>;
  WgmmaMaps maps;
  encode_activations<Math::Tf32x3, C, Shape>(in, n, &maps.a);
  for (int z = 0; z < 4; ++z) maps.b[z] = weights.b[z];
  const int m_total = n * C::H * C::H;
  const dim3 grid((m_total + Shape::BM - 1) / Shape::BM, C::C_OUT / C::BN, 4);
  tf32x3_kernel_of<S, Small, SCHEDULE>()<<<grid, Shape::kThreads, Shape::kSmemBytes, stream>>>(maps, scale, shift, out,
                                                                                               m_total, weights.ksize);
  CUDA_CHECK_LAUNCH();
}

template <int S>
void launch_stage(bool small, int schedule, const float* in, int n, const PhaseWeightMaps& w, const float* scale,
                  const float* shift, float* out, cudaStream_t stream) {
  if (schedule == 0) {
    if (small) launch<S, true, 0>(in, n, w, scale, shift, out, stream);
    else launch<S, false, 0>(in, n, w, scale, shift, out, stream);
  } else if (schedule == 1) {
    if (small) launch<S, true, 1>(in, n, w, scale, shift, out, stream);
    else launch<S, false, 1>(in, n, w, scale, shift, out, stream);
  } else {
    if (small) launch<S, true, 2>(in, n, w, scale, shift, out, stream);
    else launch<S, false, 2>(in, n, w, scale, shift, out, stream);
  }
}

}  // namespace

void make_tf32x3_weight_maps(int stage, int ksize, const float* split_weight, PhaseWeightMaps* maps) {
  if (ksize != 4 && ksize != 5) throw std::logic_error("the wgmma phase GEMMs take kernel size 4 or 5");
  switch (stage) {
    case 0: make_maps<0>(ksize, split_weight, maps); break;
    case 1: make_maps<1>(ksize, split_weight, maps); break;
    case 2: make_maps<2>(ksize, split_weight, maps); break;
    default: throw std::logic_error("tconv stage must be 0, 1 or 2");
  }
}

void configure_wgmma_tf32x3() {
  configure_stage<0>();
  configure_stage<1>();
  configure_stage<2>();
}

int64_t wgmma_tf32x3_large_blocks(int stage, int n) {
  auto blocks = [n](int h, int bm, int n_tiles) { return (int64_t{n} * h * h + bm - 1) / bm * n_tiles * 4; };
  using L0 = Tf32x3Stage<0, false, 0>;
  using L1 = Tf32x3Stage<1, false, 0>;
  using L2 = Tf32x3Stage<2, false, 0>;
  switch (stage) {
    case 0: return blocks(L0::H, 64 * L0::CONSUMERS, L0::C_OUT / L0::BN);
    case 1: return blocks(L1::H, 64 * L1::CONSUMERS, L1::C_OUT / L1::BN);
    case 2: return blocks(L2::H, 64 * L2::CONSUMERS, L2::C_OUT / L2::BN);
    default: throw std::logic_error("tconv stage must be 0, 1 or 2");
  }
}

void launch_tconv_wgmma_tf32x3(int stage, bool small, int schedule, const float* in, int n,
                               const PhaseWeightMaps& weights, const float* scale, const float* shift, float* out,
                               cudaStream_t stream) {
  if (schedule < 0 || schedule > 2) throw std::logic_error("the float32 wgmma kernels have schedules 0, 1 and 2");
  if (n <= 0) return;
  switch (stage) {
    case 0: launch_stage<0>(small, schedule, in, n, weights, scale, shift, out, stream); break;
    case 1: launch_stage<1>(small, schedule, in, n, weights, scale, shift, out, stream); break;
    case 2: launch_stage<2>(small, schedule, in, n, weights, scale, shift, out, stream); break;
    default: throw std::logic_error("tconv stage must be 0, 1 or 2");
  }
}

}  // namespace gpu
}  // namespace facegen
