// build_info.cpp: the build's identity for --version (see build_info.hpp). The FACEGEN_* macros come
// from the Makefile; a compiler run without them (a fuzz target, an IDE) gets "unknown".
#include "common/build_info.hpp"

#include "common/version.hpp"

#ifndef FACEGEN_GIT_COMMIT
#define FACEGEN_GIT_COMMIT "unknown"
#endif
#ifndef FACEGEN_CPU_ARCH
#define FACEGEN_CPU_ARCH "unknown"
#endif
#ifndef FACEGEN_CUDA_ARCHS
#define FACEGEN_CUDA_ARCHS ""
#endif
#ifndef FACEGEN_MPI
#define FACEGEN_MPI 0
#endif

namespace facegen {

const char* git_commit() { return FACEGEN_GIT_COMMIT; }

std::string cpu_vector_text() {
  // The widest instruction set the compiler was allowed for the CPU layers' 8-float vectors.
#if defined(__AVX512F__)
  const char* isa = "AVX-512";
#elif defined(__AVX2__)
  const char* isa = "AVX2";
#elif defined(__AVX__)
  const char* isa = "AVX";
#elif defined(__SSE2__)
  const char* isa = "SSE2";
#else
  const char* isa = "no x86 vector";
#endif
  return std::string("-march=") + FACEGEN_CPU_ARCH + ", " + isa + " instructions (8-float vectors in the layers)";
}

std::string version_text() {
  const std::string cuda_archs = FACEGEN_CUDA_ARCHS;
  std::string text = "facegen " FACEGEN_VERSION " (commit " FACEGEN_GIT_COMMIT ")\n";
  text += "  CUDA  " + (cuda_archs.empty() ? std::string("no (built with CUDA=0)") : "yes, for " + cuda_archs) + "\n";
  text += std::string("  MPI   ") + (FACEGEN_MPI ? "yes (mpirun, srun)" : "no (built with MPI=0)") + "\n";
  text += "  CPU   " + cpu_vector_text() + "\n";
  return text;
}

}  // namespace facegen
