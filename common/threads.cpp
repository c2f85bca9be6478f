// threads.cpp: the number of CPUs a process was given (see threads.hpp).
//
// std::thread::hardware_concurrency() counts the machine's CPUs, not the ones a process may run on:
// under `taskset -c 0`, a Slurm task with --cpus-per-task=2 or a container with a 1.5-CPU quota it
// still says "all of them", and threads beyond the given CPUs only take turns.
#include "common/threads.hpp"

#include <sched.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace facegen {
namespace {

// A positive integer environment variable, or 0 when unset or malformed.
int positive_env(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return 0;
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || value < 1 || value > 1 << 20) return 0;
  return static_cast<int>(value);
}

// cgroup v2 "cpu.max" ("max 100000" or "150000 100000") of this process's cgroup: the quota in CPUs,
// rounded up, or 0 when there is none. cgroup v1's cfs_quota_us / cfs_period_us likewise.
int cgroup_quota_cpus() {
  std::ifstream cgroup_file("/proc/self/cgroup");
  std::string line;
  std::string v2_path;
  while (std::getline(cgroup_file, line)) {
    if (line.rfind("0::", 0) == 0) v2_path = line.substr(3);
  }
  auto quota_of = [](double quota, double period) {
    if (quota <= 0 || period <= 0) return 0;
    return static_cast<int>(std::ceil(quota / period));
  };
  if (!v2_path.empty()) {
    // The process's own cgroup and each parent up to the root: the tightest quota wins.
    int best = 0;
    for (std::string path = v2_path;; path = path.substr(0, path.find_last_of('/'))) {
      std::ifstream max_file("/sys/fs/cgroup" + path + "/cpu.max");
      std::string quota;
      double period = 0;
      if (max_file >> quota >> period && quota != "max") {
        const int cpus = quota_of(std::atof(quota.c_str()), period);
        if (cpus > 0 && (best == 0 || cpus < best)) best = cpus;
      }
      if (path.empty() || path == "/") break;
    }
    return best;
  }
  std::ifstream quota_file("/sys/fs/cgroup/cpu/cpu.cfs_quota_us");
  std::ifstream period_file("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
  double quota = 0, period = 0;
  if (quota_file >> quota && period_file >> period) return quota_of(quota, period);
  return 0;
}

}  // namespace

int available_cpus(std::string* why) {
  const unsigned hardware = std::thread::hardware_concurrency();
  int cpus = hardware > 0 ? static_cast<int>(hardware) : 1;
  std::string reason = "all CPUs of the machine";
  auto limit = [&](int value, const std::string& what) {
    if (value > 0 && value < cpus) {
      cpus = value;
      reason = what;
    }
  };
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) limit(CPU_COUNT(&set), "the CPU affinity mask");
  // The quota is read once: a process's cgroup does not change under it in practice, and reading
  // it costs tens of microseconds, which every parallel loop would pay.
  static const int quota = cgroup_quota_cpus();
  limit(quota, "the cgroup CPU quota");
  for (const char* name : {"SLURM_CPUS_PER_TASK", "OMP_NUM_THREADS"}) {
    const int value = positive_env(name);
    limit(value, std::string(name) + "=" + std::to_string(value));
  }
  if (why != nullptr) *why = reason;
  return cpus;
}

}  // namespace facegen
