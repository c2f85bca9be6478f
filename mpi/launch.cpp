// launch.cpp: telling a rank from a process on its own, by the launchers' environment variables.
#include "mpi/launch.hpp"

#include <cstdlib>
#include <string>

namespace facegen {
namespace mpi {
namespace {

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

int env_int(const char* name, int fallback) {
  const char* value = env(name);
  if (value == nullptr) return fallback;
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  return end != value && *end == '\0' ? static_cast<int>(parsed) : fallback;
}

}  // namespace

Launch detect_launch() {
  Launch launch;
  // OpenMPI's mpirun; PMIx (mpirun's, or srun --mpi=pmix); PMI-2 (srun --mpi=pmi2).
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    if (env(name) != nullptr) {
      launch.kind = LaunchKind::Rank;
      launch.rank_hint = env_int(name, 0);
      return launch;
    }
  }
  // A Slurm job step of several tasks with no MPI wiring. SLURM_STEP_NUM_TASKS is set by srun only,
  // not in the batch script itself, so a plain `build/facegen` inside an sbatch script still runs.
  const int step_tasks = env_int("SLURM_STEP_NUM_TASKS", 1);
  if (env("SLURM_STEP_ID") != nullptr && step_tasks > 1) {
    launch.kind = LaunchKind::Unusable;
    launch.rank_hint = env_int("SLURM_PROCID", 0);
    launch.problem = "started by srun as one of " + std::to_string(step_tasks) +
                     " tasks without MPI: use srun --mpi=pmix (or run_parallel.sh), so that the tasks form one job";
  }
  return launch;
}

bool prints_shared_messages(const Launch& launch) { return launch.rank_hint == 0; }

}  // namespace mpi
}  // namespace facegen
