// rank_job_unavailable.cpp: run_as_rank and serve_as_ranks for a build without MPI (make MPI=0, or no mpicxx found).
#include "common/errors.hpp"
#include "mpi/rank_job.hpp"
#include "mpi/serve_ranks.hpp"

namespace facegen {
namespace mpi {

bool mpi_available() { return false; }

int end_rank_before_job(int status) { return status; }

int run_as_rank(const GenerateRequest&, const RankJobOptions&) {
  throw UserError("this facegen was built without MPI, so it cannot run as one rank of a parallel job "
                  "(install libopenmpi-dev and rebuild)");
}

int serve_as_ranks(const Network&, const BackendOptions&, const ServeWith&) {
  throw UserError("this facegen was built without MPI, so it cannot serve as the ranks of a parallel job "
                  "(install libopenmpi-dev and rebuild)");
}

}  // namespace mpi
}  // namespace facegen
