// mpi_check.cpp: MPI error reporting (see mpi_check.hpp).
#include "mpi/mpi_check.hpp"

#include <cstdio>
#include <cstdlib>

#include "common/errors.hpp"
#include "common/temp_registry.hpp"

namespace facegen {
namespace mpi {
namespace {

int g_rank = -1;
std::string g_host = "?";

}  // namespace

void set_identity(int world_rank, const std::string& host) {
  g_rank = world_rank;
  g_host = host;
}

int identity_rank() { return g_rank; }
const std::string& identity_host() { return g_host; }

std::string rank_error_text(const std::string& message) {
  return "on rank " + std::to_string(g_rank) + " (host " + g_host + "): " + message;
}

void print_rank_error(const std::string& message) {
  // One write, so that lines of several ranks never interleave mid-line.
  const std::string line = "facegen: error " + rank_error_text(message) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(length));
}

void abort_on_mpi_error(int code, const char* call, const char* file, int line) {
  print_rank_error(std::string("MPI call ") + call + " failed at " + file + ":" + std::to_string(line) + ": " +
                   mpi_error_text(code));
  remove_registered_temps(nullptr);  // MPI_Abort runs no destructor
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::_Exit(3);  // MPI_Abort does not return; this is for the compiler and for broken MPIs
}

void check_file(int code, const char* what, const std::string& path) {
  if (code != MPI_SUCCESS) throw UserError(std::string(what) + " " + path + ": " + mpi_error_text(code));
}

}  // namespace mpi
}  // namespace facegen
