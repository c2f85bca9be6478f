// serve_ranks.cpp: see serve_ranks.hpp. Messages between rank 0 and rank r: a count n (int64, tag
// kCountTag; n < 0 ends rank r), then n x nz latent floats (kLatentTag), answered by n x values image
// floats (kImageTag). Each rank's worker on rank 0 talks only to its rank, from one thread, so the
// messages of one rank never interleave; the waits are polite (polite_wait.hpp), not spinning.
#include "mpi/serve_ranks.hpp"

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "mpi/polite_wait.hpp"
#include "mpi/rank_topology.hpp"

namespace facegen {
namespace mpi {
namespace {

constexpr int kCountTag = 7101, kLatentTag = 7102, kImageTag = 7103;

void send(const void* data, int64_t count, MPI_Datatype type, int to, int tag, MPI_Comm comm) {
  MPI_Request request;
  MPI_Isend(data, static_cast<int>(count), type, to, tag, comm, &request);
  wait_politely(&request);
}

void receive(void* data, int64_t count, MPI_Datatype type, int from, int tag, MPI_Comm comm) {
  MPI_Request request;
  MPI_Irecv(data, static_cast<int>(count), type, from, tag, comm, &request);
  wait_politely(&request);
}

// Rank 0's view of rank r: a backend that has rank r generate each batch.
class RankBackend : public Backend {
 public:
  RankBackend(MPI_Comm comm, int rank, const ModelSpec& spec) : comm_(comm), rank_(rank), spec_(spec) {}
  std::string describe() const override { return "rank " + std::to_string(rank_); }
  void generate(const float* latents, int64_t n, float* images) override {
    send(&n, 1, MPI_INT64_T, rank_, kCountTag, comm_);
    send(latents, n * spec_.latent_dim, MPI_FLOAT, rank_, kLatentTag, comm_);
    receive(images, n * spec_.image_values(), MPI_FLOAT, rank_, kImageTag, comm_);  // (n, S, S, nc)
  }

 private:
  MPI_Comm comm_;
  int rank_;
  ModelSpec spec_;
};

// Every rank but 0: generate what rank 0 sends until it sends a negative count.
void generate_for_rank0(MPI_Comm comm, const Network& net, Backend& backend) {
  std::vector<float> latents, images;
  for (;;) {
    int64_t n = 0;
    receive(&n, 1, MPI_INT64_T, 0, kCountTag, comm);
    if (n < 0) return;
    latents.resize(static_cast<size_t>(n * net.spec().latent_dim));   // (n, nz)
    images.resize(static_cast<size_t>(n * net.spec().image_values()));  // (n, S, S, nc)
    receive(latents.data(), n * net.spec().latent_dim, MPI_FLOAT, 0, kLatentTag, comm);
    backend.generate(latents.data(), n, images.data());
    send(images.data(), n * net.spec().image_values(), MPI_FLOAT, 0, kImageTag, comm);
  }
}

}  // namespace

int serve_as_ranks(const Network& net, const BackendOptions& options, const ServeWith& serve) {
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS || provided < MPI_THREAD_MULTIPLE) {
    throw std::runtime_error("MPI could not start with threads (MPI_THREAD_MULTIPLE)");
  }
  MPI_Comm world;
  MPI_Comm_dup(MPI_COMM_WORLD, &world);
  const RankTopology topo = discover_topology(world);
  const DeviceChoice choice = choose_device(options, topo.local_rank);
  std::unique_ptr<Backend> own = choice.options.device == DeviceKind::Cuda ? make_cuda_backend(net, choice.options)
                                                                            : make_cpu_backend(net, choice.options);
  int status = 0;
  if (topo.world_rank == 0) {
    std::vector<std::unique_ptr<Backend>> backends;
    backends.push_back(std::move(own));
    for (int r = 1; r < topo.world_size; ++r) backends.push_back(std::make_unique<RankBackend>(world, r, net.spec()));
    status = serve(std::move(backends));  // returns once the batcher has stopped: no batch in flight
    const int64_t end = -1;
    for (int r = 1; r < topo.world_size; ++r) send(&end, 1, MPI_INT64_T, r, kCountTag, world);
  } else {
    generate_for_rank0(world, net, *own);
  }
  MPI_Comm_free(&world);
  MPI_Finalize();
  return status;
}

}  // namespace mpi
}  // namespace facegen
