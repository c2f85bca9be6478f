// cpu_isa.cpp: the CPU's vector instructions, from cpuid (see cpu_isa.hpp).
#include "common/cpu_isa.hpp"

#include <cstdlib>

#include "common/errors.hpp"

namespace facegen {

bool cpu_supports(CpuIsa isa) {
  // GCC's checks include the OS's support for the wider registers (XGETBV), not just cpuid.
  switch (isa) {
    case CpuIsa::Avx512:
      return __builtin_cpu_supports("avx512f");
    case CpuIsa::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case CpuIsa::Sse2:
      return true;
  }
  return false;
}

std::string cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Avx512:
      return "AVX-512";
    case CpuIsa::Avx2:
      return "AVX2";
    case CpuIsa::Sse2:
      break;
  }
  return "SSE2";
}

CpuIsa best_cpu_isa() {
  CpuIsa cap = CpuIsa::Avx512;
  if (const char* env = std::getenv("FACEGEN_CPU_ISA"); env && *env) {
    const std::string name = env;
    if (name == "avx512")
      cap = CpuIsa::Avx512;
    else if (name == "avx2")
      cap = CpuIsa::Avx2;
    else if (name == "sse2")
      cap = CpuIsa::Sse2;
    else
      throw UserError("FACEGEN_CPU_ISA=" + name + " names none of avx512, avx2, sse2");
  }
  for (CpuIsa isa : {CpuIsa::Avx512, CpuIsa::Avx2})
    if (isa <= cap && cpu_supports(isa)) return isa;
  return CpuIsa::Sse2;
}

}  // namespace facegen
