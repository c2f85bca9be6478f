// test_threads.cpp: the CPU count a process was given follows its affinity mask and the variables
// that schedulers set, whichever is smallest; --threads (resolve_threads(n > 0)) overrides all.
#include <doctest/doctest.h>

#include <sched.h>
#include <stdlib.h>

#include <string>
#include <thread>

#include "common/threads.hpp"

namespace {

// Sets the process's affinity and the two variables for the test's duration, then puts them back.
struct GivenCpus {
  cpu_set_t saved;
  GivenCpus() {
    REQUIRE(sched_getaffinity(0, sizeof saved, &saved) == 0);
    unsetenv("SLURM_CPUS_PER_TASK");
    unsetenv("OMP_NUM_THREADS");
  }
  ~GivenCpus() {
    sched_setaffinity(0, sizeof saved, &saved);
    unsetenv("SLURM_CPUS_PER_TASK");
    unsetenv("OMP_NUM_THREADS");
  }
  int first_allowed() const {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &saved)) return cpu;
    return 0;
  }
};

}  // namespace

TEST_CASE("threads: one CPU in the affinity mask gives one thread") {
  GivenCpus given;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(given.first_allowed(), &one);
  REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
  std::string why;
  CHECK(facegen::available_cpus(&why) == 1);
  CHECK(why == "the CPU affinity mask");
  CHECK(facegen::resolve_threads(0) == 1);
  CHECK(facegen::resolve_threads(3) == 3);  // an explicit --threads wins
}

TEST_CASE("threads: OMP_NUM_THREADS and SLURM_CPUS_PER_TASK lower the count, never raise it") {
  GivenCpus given;
  const int all = facegen::available_cpus();
  setenv("OMP_NUM_THREADS", "1", 1);
  std::string why;
  CHECK(facegen::available_cpus(&why) == 1);
  CHECK(why == "OMP_NUM_THREADS=1");
  unsetenv("OMP_NUM_THREADS");
  setenv("SLURM_CPUS_PER_TASK", "1", 1);
  CHECK(facegen::available_cpus() == 1);
  setenv("SLURM_CPUS_PER_TASK", "100000", 1);
  CHECK(facegen::available_cpus() == all);
  for (const char* bad : {"", "0", "-2", "two", "3x"}) {
    setenv("SLURM_CPUS_PER_TASK", bad, 1);
    CHECK(facegen::available_cpus() == all);
  }
  CHECK(all >= 1);
  CHECK(all <= static_cast<int>(std::thread::hardware_concurrency()));
}
