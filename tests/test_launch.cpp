// test_launch.cpp: telling a rank of an MPI job from a process on its own, by the environment.
#include <doctest/doctest.h>

#include <cstdlib>
#include <initializer_list>
#include <string>

#include "mpi/launch.hpp"

using facegen::mpi::detect_launch;
using facegen::mpi::LaunchKind;

namespace {

// Clears every variable detect_launch reads, for the test's duration.
struct CleanLaunchEnvironment {
  CleanLaunchEnvironment() { clear(); }
  ~CleanLaunchEnvironment() { clear(); }
  static void clear() {
    for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS",
                             "SLURM_PROCID"}) {
      unsetenv(name);
    }
  }
};

}  // namespace

TEST_CASE("launch: no launcher is a process on its own") {
  CleanLaunchEnvironment clean;
  CHECK(detect_launch().kind == LaunchKind::SingleProcess);
  // Inside an sbatch script (a Slurm job, but no srun step) the program still runs alone.
  setenv("SLURM_PROCID", "0", 1);
  CHECK(detect_launch().kind == LaunchKind::SingleProcess);
}

TEST_CASE("launch: mpirun, srun --mpi=pmix and pmi2 make a rank") {
  CleanLaunchEnvironment clean;
  setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  CHECK(detect_launch().kind == LaunchKind::Rank);
  CHECK(detect_launch().rank_hint == 3);
  CHECK_FALSE(facegen::mpi::prints_shared_messages(detect_launch()));
  CleanLaunchEnvironment::clear();
  setenv("PMIX_RANK", "0", 1);
  CHECK(detect_launch().kind == LaunchKind::Rank);
  CHECK(facegen::mpi::prints_shared_messages(detect_launch()));
  CleanLaunchEnvironment::clear();
  setenv("PMI_RANK", "1", 1);
  CHECK(detect_launch().kind == LaunchKind::Rank);
}

TEST_CASE("launch: several srun tasks without MPI are refused, one task is not") {
  CleanLaunchEnvironment clean;
  setenv("SLURM_STEP_ID", "0", 1);
  setenv("SLURM_STEP_NUM_TASKS", "4", 1);
  setenv("SLURM_PROCID", "2", 1);
  const auto launch = detect_launch();
  CHECK(launch.kind == LaunchKind::Unusable);
  CHECK(launch.rank_hint == 2);
  CHECK(launch.problem.find("srun --mpi=pmix") != std::string::npos);
  setenv("SLURM_STEP_NUM_TASKS", "1", 1);
  CHECK(detect_launch().kind == LaunchKind::SingleProcess);
}
