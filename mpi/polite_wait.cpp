// polite_wait.cpp: test, spin briefly, then sleep (see polite_wait.hpp).
#include "mpi/polite_wait.hpp"

#include <chrono>
#include <thread>

#include "mpi/mpi_check.hpp"

namespace facegen {
namespace mpi {

void wait_politely(MPI_Request* request) {
  using Clock = std::chrono::steady_clock;
  const auto spin_until = Clock::now() + std::chrono::microseconds(100);
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    int done = 0;
    MPI_CHECK(MPI_Test(request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if (Clock::now() < spin_until) continue;
    std::this_thread::sleep_for(pause);
    if (pause < std::chrono::microseconds(1000)) pause *= 2;
  }
}

}  // namespace mpi
}  // namespace facegen
