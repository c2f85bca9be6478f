// agreement.cpp: failing together (see agreement.hpp).
#include "mpi/agreement.hpp"

#include "common/errors.hpp"
#include "commit/output_guard.hpp"
#include "mpi/mpi_check.hpp"
#include "mpi/polite_wait.hpp"

namespace facegen {
namespace mpi {

void record_current_exception(RankStatus& status) {
  const Failure failure = describe_current_exception();
  status.fail(failure.exit_code, failure.message);
}

bool ranks_agree(MPI_Comm comm, const RankStatus& status, int* exit_code) {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  int mine = status.failed ? rank : size;
  int first = size;
  MPI_Request request;
  MPI_CHECK(MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm, &request));
  wait_politely(&request);  // this is where ranks wait for the slowest one
  if (first == size) return true;
  int code = status.exit_code;
  MPI_CHECK(MPI_Bcast(&code, 1, MPI_INT, first, comm));
  if (rank == first) {
    // A write that failed because the outputs' folder was moved or replaced is told as that.
    const std::string change = code == kExitInput ? output_folder_change() : "";
    print_rank_error(change.empty() ? status.message : change);
  }
  *exit_code = code;
  return false;
}

}  // namespace mpi
}  // namespace facegen
