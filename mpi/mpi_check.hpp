// mpi_check.hpp: checks on MPI calls, and who this rank is for every message.
//
// MPI_CHECK(call) runs an MPI call on a communicator; if it fails (the communicators are set to
// MPI_ERRORS_RETURN), the rank prints one line naming itself, its host, the call, file and line and
// MPI's reason, removes the job's temporary output files it knows of, and ends the whole job with
// MPI_Abort: after a failed collective no agreement between ranks is possible any more.
// File operations are checked with check_file(), which throws UserError instead: a full disk or a
// missing directory is the user's to fix, and the ranks still agree on how to stop.
#pragma once

#include <mpi.h>

#include <string>

namespace facegen {
namespace mpi {

// Set once after MPI_Init, read by every message.
void set_identity(int world_rank, const std::string& host);
int identity_rank();
const std::string& identity_host();

// "facegen: error on rank R (host H): " + message, one line on stderr.
void print_rank_error(const std::string& message);
std::string rank_error_text(const std::string& message);  // "on rank R (host H): MESSAGE"

[[noreturn]] void abort_on_mpi_error(int code, const char* call, const char* file, int line);

// Throws UserError("<what> <path>: <MPI's reason>") when code is not MPI_SUCCESS.
void check_file(int code, const char* what, const std::string& path);

std::string mpi_error_text(int code);

}  // namespace mpi
}  // namespace facegen

#define MPI_CHECK(call)                                                              \
  do {                                                                               \
    const int mpi_check_code_ = (call);                                              \
    if (mpi_check_code_ != MPI_SUCCESS) {                                            \
      ::facegen::mpi::abort_on_mpi_error(mpi_check_code_, #call, __FILE__, __LINE__); \
    }                                                                                \
  } while (0)
