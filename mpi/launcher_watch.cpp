// launcher_watch.cpp: the rank's watch on its parent (see launcher_watch.hpp).
#include "mpi/launcher_watch.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

namespace facegen {
namespace mpi {
namespace {

constexpr auto kLookEvery = std::chrono::milliseconds(200);
constexpr auto kTermGrace = std::chrono::seconds(10);

// "mpirun", "orted", "slurmstepd": the parent's name, for the line; "" when it cannot be read.
std::string process_name(pid_t pid) {
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(comm, name);
  return name;
}

std::string host_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return "?";
  return host;
}

void watch(pid_t parent, std::string parent_name, int rank_hint) {
  while (::getppid() == parent) std::this_thread::sleep_for(kLookEvery);
  // One write; the launcher's end of stderr may be gone too, and a SIGPIPE then stops the rank the
  // same way as the SIGTERM below.
  const std::string line = "facegen: error on rank " + std::to_string(rank_hint) + " (host " + host_name() +
                           "): the launcher that started this rank (" +
                           (parent_name.empty() ? "" : parent_name + ", ") + "pid " + std::to_string(parent) +
                           ") ended; the rank stops\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
  ::kill(::getpid(), SIGTERM);
  std::this_thread::sleep_for(kTermGrace);
  ::kill(::getpid(), SIGKILL);
}

}  // namespace

void watch_launcher(int rank_hint) {
  static bool started = false;
  if (started) return;
  started = true;
  const pid_t parent = ::getppid();
  if (parent <= 1) return;
  // The watch takes no signal itself: a signal for the process (SIGTERM) must reach the threads that
  // handle or wait for it (the service waits for its signals in a thread of its own, with them
  // blocked everywhere else; a thread that left them open would take them and end the process).
  // A new thread inherits its creator's mask: everything is blocked around its start.
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &before);
  std::thread(watch, parent, process_name(parent), rank_hint).detach();
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
}

}  // namespace mpi
}  // namespace facegen
