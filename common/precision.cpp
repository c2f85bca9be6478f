// precision.cpp: the names of the GPU arithmetic modes (see precision.hpp).
#include "common/precision.hpp"

#include "common/errors.hpp"

namespace facegen {

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::Fp32: return "fp32";
    case Precision::Tf32: return "tf32";
    case Precision::Bf16: return "bf16";
  }
  return "?";
}

Precision parse_precision(const std::string& name) {
  for (Precision p : {Precision::Fp32, Precision::Tf32, Precision::Bf16}) {
    if (name == precision_name(p)) return p;
  }
  throw UserError("unknown --precision '" + name + "' (expected fp32, tf32 or bf16)");
}

}  // namespace facegen
