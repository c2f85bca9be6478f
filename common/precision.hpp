// precision.hpp: the arithmetic of the GPU's matrix products, and its names on the command line.
//
// Fp32: exact float32 multiply-adds (the default). Tf32: tensor cores on operands rounded to tf32
// (10-bit mantissa), float32 accumulation. Bf16: tensor cores on bfloat16 operands and activations,
// float32 accumulation. The CPU backend always computes in float32.
#pragma once

#include <string>

namespace facegen {

enum class Precision { Fp32, Tf32, Bf16 };

const char* precision_name(Precision precision);       // "fp32", "tf32", "bf16"
Precision parse_precision(const std::string& name);    // throws UserError naming --precision

}  // namespace facegen
