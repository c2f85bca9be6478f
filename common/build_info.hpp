// build_info.hpp: what this build of facegen is, for --version: the version, the git commit it was
// built from, and what it was built with (CUDA and its GPU architectures, MPI, the CPU code's target).
//
// The Makefile bakes the commit and the build's choices into common/build_info.cpp alone, so a new
// commit recompiles that one file.
#pragma once

#include <string>

namespace facegen {

const char* git_commit();         // "d49ef2f1a2b3", "...-dirty", or "unknown" outside a git checkout
const char* cuda_architectures(); // "90a", "80 90a", or "" for a build without CUDA
bool built_with_mpi();
std::string version_text();       // several lines: version and commit, then one line per capability
std::string cpu_vector_text();    // e.g. "-march=x86-64; the CPU backend's kernels: AVX-512 on this CPU ..."

}  // namespace facegen
