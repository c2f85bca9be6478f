// latent_draw.cuh: the GPU's Box-Muller for drawn_value (common/latent_draw.hpp), and its doubt.
//
// CUDA's log and cos (documented within 1 and 2 ulp) may differ from glibc's in the last bits of z;
// the square root and the products are correctly rounded (__dsqrt_rn, __dmul_rn: no contraction into
// an FMA), as on the host. A draw is marked uncertain as draw_uncertain says (its float might differ
// from the host's); its value is then made on the host.
#pragma once

#include "common/latent_draw.hpp"

namespace facegen {
namespace gpu {

struct DeviceBoxMuller {
  double agreement = kDrawAgreement;
  bool uncertain = false;  // some draw of this value was

  __device__ double operator()(double u1, double u2) {
    const double z = __dmul_rn(__dsqrt_rn(__dmul_rn(-2.0, log(u1))), cos(__dmul_rn(kBoxMullerTurn, u2)));
    uncertain = uncertain || draw_uncertain(u1, z, agreement);
    return z;
  }
};

}  // namespace gpu
}  // namespace facegen
