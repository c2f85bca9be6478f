// agreement.hpp: how the ranks stop together when one of them fails.
//
// A rank never leaves the job's sequence of collective calls on its own: it catches its error
// into a RankStatus and carries on to the next agreement point, where every rank calls ranks_agree().
// If any rank failed, the failed rank with the lowest number (the earliest in the file, for input
// errors) prints its one line, "facegen: error on rank R (host H): <message>", every rank learns
// that rank's exit status, and all of them leave cleanly: rank 0 removes the temporary outputs.
// Only what cannot be agreed on (a broken MPI call, a rank that died) ends the job through
// MPI_Abort or mpirun.
#pragma once

#include <mpi.h>

#include <string>

#include "common/errors.hpp"

namespace facegen {
namespace mpi {

struct RankStatus {
  bool failed = false;
  int exit_code = 0;
  std::string message;

  void fail(int code, const std::string& why) {
    if (failed) return;  // the first error is the one worth reading
    failed = true;
    exit_code = code;
    message = why;
  }
};

// Runs step(), turning what it throws into a failure of this rank: UserError -> status 1, anything
// else -> status 3. Does nothing if the rank has already failed.
template <class Step>
void attempt(RankStatus& status, Step&& step);

// Collective. True if no rank has failed. Otherwise the lowest failed rank prints its message, and
// *exit_code and *message (where given: what it printed after "facegen: error ", "on rank R (host
// H): ...", for the failure's JSON summary) are set on every rank.
bool ranks_agree(MPI_Comm comm, const RankStatus& status, int* exit_code, std::string* message = nullptr);

// Implementation of attempt(); kept out of line of the declaration for reading.
void record_current_exception(RankStatus& status);

template <class Step>
void attempt(RankStatus& status, Step&& step) {
  if (status.failed) return;
  try {
    step();
  } catch (...) {
    record_current_exception(status);
  }
}

}  // namespace mpi
}  // namespace facegen
