// build_info.cpp: the build's identity for --version (see build_info.hpp). The FACEGEN_* macros come
// from the Makefile; a compiler run without them (a fuzz target, an IDE) gets "unknown".
#include "common/build_info.hpp"

#include "common/cpu_isa.hpp"
#include "common/errors.hpp"
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
const char* cuda_architectures() { return FACEGEN_CUDA_ARCHS; }
bool built_with_mpi() { return FACEGEN_MPI != 0; }

std::string cpu_vector_text() {
  std::string kernels;
  try {
    kernels = cpu_isa_name(best_cpu_isa());
  } catch (const UserError& e) {  // --version still answers, naming the bad setting
    kernels = e.what();
  }
  return std::string("-march=") + FACEGEN_CPU_ARCH + "; the CPU backend's kernels: " + kernels +
         " on this CPU (picked at run time from AVX-512, AVX2, SSE2)";
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
