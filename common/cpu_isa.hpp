// cpu_isa.hpp: which vector instructions this CPU offers the CPU backend's kernels.
//
// The program is built for plain x86-64; the kernels come in three widths (kernels/cpu/phase_gemm_cpu*)
// and the widest the CPU and OS support is picked at run time, capped by FACEGEN_CPU_ISA=avx512|
// avx2|sse2 (to test the narrower paths, or to match another machine's rounding).
#pragma once

#include <string>

namespace facegen {

enum class CpuIsa { Sse2, Avx2, Avx512 };  // narrowest first

bool cpu_supports(CpuIsa isa);         // AVX-512: avx512f; AVX2: avx2 and fma; SSE2: always
std::string cpu_isa_name(CpuIsa isa);  // "AVX-512", "AVX2", "SSE2"

// The widest instruction set this CPU supports, capped by FACEGEN_CPU_ISA when it is set. Throws
// UserError for a FACEGEN_CPU_ISA that names none of avx512, avx2, sse2.
CpuIsa best_cpu_isa();

}  // namespace facegen
