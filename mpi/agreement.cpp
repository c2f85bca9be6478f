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

bool ranks_agree(MPI_Comm comm, const RankStatus& status, int* exit_code, std::string* message) {
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
  std::string said;
  if (rank == first) {
    // A write that failed because the outputs' folder was moved or replaced is told as that.
    const std::string change = code == kExitInput ? output_folder_change() : "";
    said = change.empty() ? status.message : change;
    print_rank_error(said);
    said = rank_error_text(said);
  }
  int length = static_cast<int>(said.size());
  MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT, first, comm));
  said.resize(static_cast<size_t>(length));
  MPI_CHECK(MPI_Bcast(said.data(), length, MPI_CHAR, first, comm));
  if (message != nullptr) *message = said;
  *exit_code = code;
  return false;
}

}  // namespace mpi
}  // namespace facegen
