// errors.hpp: how the program tells a user's mistake apart from a fault of its own.
//
// UserError carries one sentence meant for the person running the program (what is wrong, where,
// expected against found); main() prints it and exits with status 1. Any other exception is a fault
// of the program or its environment (a CUDA or MPI failure) and carries file and line; exit status 3.
#pragma once

#include <stdexcept>
#include <string>

namespace facegen {

// Exit statuses, the same for a single process and for every rank of a parallel job.
constexpr int kExitOk = 0;
constexpr int kExitInput = 1;  // a problem with the input: a file, a value, a flag
constexpr int kExitUsage = 2;  // a malformed command line
constexpr int kExitFault = 3;  // a fault of the program or its environment (CUDA, MPI, memory)
constexpr int kExitRolledBack = 4;  // --finish-commit: the commit was undone, the old outputs are back

struct UserError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What the exception being handled means for the user: its exit status and its one line (without
// the "facegen: error: " or "fault: " in front). Out of memory in any form (std::bad_alloc, a thread
// that could not start for want of memory or address space) is one fault with one wording, whether
// a single process or a rank reports it. Call only inside a catch block.
struct Failure {
  int exit_code;
  std::string message;
};
Failure describe_current_exception();

}  // namespace facegen
