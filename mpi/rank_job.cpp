// rank_job.cpp: one generation job as one rank of an MPI job (see rank_job.hpp for the order of work).
//
// For tests, FACEGEN_TEST_FAULT=RANK:KIND makes rank RANK fail as it starts its first slice:
// KIND "error" throws a fault (the ranks agree and stop), "exit" ends the process without a word
// (a rank that crashes), "kill" sends it SIGKILL. Nothing else reads it.
#include "mpi/rank_job.hpp"

#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.hpp"
#include "engine/piece_plan.hpp"
#include "files/output_guard.hpp"
#include "files/stop_signals.hpp"
#include "files/temp_registry.hpp"
#include "generator/backend.hpp"
#include "generator/finite_check.hpp"
#include "common/errors.hpp"
#include "files/input_file.hpp"
#include "files/latent_source.hpp"
#include "generator/network.hpp"
#include "common/text_format.hpp"
#include "run/progress.hpp"
#include "run/summary.hpp"
#include "mpi/agreement.hpp"
#include "mpi/job_progress.hpp"
#include "mpi/mpi_check.hpp"
#include "mpi/ordered_output.hpp"
#include "mpi/polite_wait.hpp"
#include "mpi/rank_topology.hpp"
#include "mpi/same_file.hpp"
#include "mpi/shared_latents.hpp"
#include "mpi/work_split.hpp"

namespace facegen {
namespace mpi {
namespace {

// Below these many images per rank, an extra rank costs more than it saves (docs/benchmarks/history.md,
// "MPI scaling"). Measured on two H200s with the phase-GEMM kernels (about 90,000 images/s per
// GPU): a second GPU rank costs 0.13-0.22 s end to end (its CUDA context, weights and teardown
// beside the first's) and saves about 0.034 ms per image (half of the formatting and generation;
// writing scaled little), so two ranks break even near 6,000 images: 2 x 4,096 leaves a margin.
// On the CPU a rank's start-up (reading and checking the 20 MB model) is worth a few images.
constexpr int64_t kDefaultMinImagesCuda = 4096;
constexpr int64_t kDefaultMinImagesCpu = 8;
// A CPU rank generates its slice in steps of this many images and tells rank 0 after each, so the
// job's progress moves during a long slice (a GPU rank's slice takes milliseconds: one step).
constexpr int64_t kCpuProgressStep = 64;

void maybe_inject_fault(int rank) {
  const char* spec = std::getenv("FACEGEN_TEST_FAULT");
  if (spec == nullptr) return;
  const char* colon = std::strchr(spec, ':');
  if (colon == nullptr || std::atoi(spec) != rank) return;
  const std::string kind = colon + 1;
  if (kind == "error") throw std::runtime_error("injected fault (FACEGEN_TEST_FAULT=" + std::string(spec) + ")");
  if (kind == "exit") std::_Exit(3);
  if (kind == "kill") std::raise(SIGKILL);
}


// Seconds one rank spent in each part of the job; the summary shows the slowest rank's.
struct Times {
  double startup = 0;  // model load and backend start (the fixed cost of a rank)
  double parse = 0;    // reading latents (each rank its own, or rank 0 for all)
  double compute = 0;  // generation
  double write = 0;    // the writer thread's busy time: text, pixels, MPI-IO writes
  double total = 0;    // from MPI_Init's return to the files being in place
};
constexpr int kTimeFields = sizeof(Times) / sizeof(double);

class RankJob {
 public:
  RankJob(MPI_Comm world, const RankTopology& topo, const GenerateRequest& request, const RankJobOptions& options)
      : world_(world), topo_(topo), request_(request), options_(options), latents_(request.latents) {}

  int run();

 private:
  int run_steps();
  // Steps 0 and 1 of run_steps: the model's shape, N (read by rank 0, told to all) and whether every
  // rank reads its own latents (shared); reader is rank 0's source, or every rank's when shared.
  int64_t open_inputs(RankStatus& status, RankStatus& input_status, std::unique_ptr<LatentSource>& reader, bool& shared);
  // Step 4: every round read, generated and handed to the outputs. False when the ranks agreed to stop
  // (a failure anywhere); the outputs are then finished and exit_code_ says why.
  bool run_rounds(const WorkSplit& split, OrderedOutputs& outputs, LatentSource* reader, bool shared, RankStatus& status);
  // images: the round's buffer, (count, 64, 64, nc) in `encoding`.
  void generate_slice(const float* latents, int64_t count, int64_t first_index, ImageEncoding encoding, void* images);
  RunSummary gather_summary(const WorkSplit& split, const OrderedOutputs& outputs);
  bool agree(const RankStatus& status) { return ranks_agree(world_, status, &exit_code_); }
  int64_t default_min_images() const;
  void start_backend(int active, const std::vector<int>& node_of_rank);
  void report_ranks(const WorkSplit& split);

  MPI_Comm world_;
  RankTopology topo_;
  const GenerateRequest& request_;
  RankJobOptions options_;
  int exit_code_ = 0;
  bool is_root_ = false;

  ModelSpec spec_ = kShpcSpec;  // the model file's, read by every rank before the latents
  std::unique_ptr<InputFile> model_file_;  // opened once for the spec and the weights
  LatentSpec latents_;          // the request's, with the model's nz
  std::optional<Network> net_;  // the backend keeps its own copy; this one names the layer of a non-finite image
  std::unique_ptr<Backend> backend_;
  std::string backend_text_ = "sits out";
  std::string notice_;
  int64_t min_images_ = 1;
  int cpu_threads_ = 1;  // this rank's share of its node's CPUs
  std::string latents_text_;  // rank 0: where the latents come from
  Times times_;
  bool on_cpu_ = false;
  std::string device_ = "cpu";  // "cuda", "cpu", "synthetic": the device this rank's backend runs on
  int64_t generated_ = 0;       // images this rank has generated so far
  std::vector<uint8_t> flags_;  // (slice): each image's scan (generator/finite_check.hpp)
  std::unique_ptr<JobProgress> progress_;
  std::unique_ptr<ProgressDisplay> display_;  // rank 0
  std::unique_ptr<OutputGuard> guard_;         // rank 0: the prefix's lock, until the outputs are in place
};

int64_t RankJob::default_min_images() const {
  if (options_.all_ranks) return 1;
  if (options_.min_images_per_rank > 0) return options_.min_images_per_rank;
  const bool gpu = choose_device(request_.backend, topo_.local_rank).options.device == DeviceKind::Cuda;
  return gpu ? kDefaultMinImagesCuda : kDefaultMinImagesCpu;
}

void RankJob::start_backend(int active, const std::vector<int>& node_of_rank) {
  const auto start = Clock::now();
  // The synthetic backend computes no network: like the single-process driver, it reads no model.
  net_ = request_.backend.device == DeviceKind::Synthetic ? Network() : load_network(*model_file_);
  model_file_.reset();
  const Network& net = *net_;
  const DeviceChoice choice = choose_device(request_.backend, topo_.local_rank);
  BackendOptions backend = choice.options;
  // The node's CPUs are shared by the generating ranks on it: they run a CPU backend, or format text.
  const int sharing = static_cast<int>(std::count_if(node_of_rank.begin(), node_of_rank.begin() + active,
                                                     [&](int node) { return node == topo_.node_index; }));
  cpu_threads_ = backend.threads > 0 ? backend.threads : cpu_threads_for_rank(sharing);
  if (backend.device == DeviceKind::Cpu) backend.threads = cpu_threads_;
  notice_ = choice.notice(cpu_threads_);
  on_cpu_ = backend.device == DeviceKind::Cpu;
  device_ = backend.device == DeviceKind::Cuda ? "cuda" : backend.device == DeviceKind::Synthetic ? "synthetic" : "cpu";
  backend.images_done = &progress_->own_count();
  backend.images = image_encoding_for(request_.formats);  // OrderedOutputs' buffers hold them so
  std::string ignored;
  backend_ = make_backend(net, backend, &ignored);
  backend_text_ = backend_->describe();
  times_.startup = seconds_since(start);
}

// Every rank leaves run_steps() at the same agreement point (or the job is aborted), so the
// collective close of the progress window here is reached by all.
int RankJob::run() {
  is_root_ = topo_.world_rank == 0;
  progress_ = std::make_unique<JobProgress>(world_, topo_.world_rank, topo_.world_size);
  const int code = run_steps();
  if (display_) display_->finish();
  progress_->close();
  return code;
}

// This rank's slice, in steps that tell rank 0 how far it is (see kCpuProgressStep).
// first_index: the index of latents[0] in the whole job.
void RankJob::generate_slice(const float* latents, int64_t count, int64_t first_index, ImageEncoding encoding,
                             void* images) {
  const int64_t bytes_per_image = image_bytes(encoding, spec_.image_channels);
  const int64_t step = on_cpu_ ? kCpuProgressStep : std::max<int64_t>(count, 1);
  flags_.resize(static_cast<size_t>(std::max<int64_t>(count, 1)));
  for (int64_t first = 0; first < count; first += step) {
    const int64_t n = std::min(step, count - first);
    const float* z = latents + first * latents_.latent_dim;
    const ImageTarget out{encoding, static_cast<char*>(images) + first * bytes_per_image, flags_.data() + first,
                          latents_.latent_dim, spec_.image_channels};
    backend_->generate_checked(z, n, out, cpu_threads_);
    require_finite_flags(*net_, request_.model_path, z, out.flags, n, first_index + first, cpu_threads_);
    progress_->own_count().store(generated_ + first + n, std::memory_order_relaxed);
    progress_->publish();
  }
  generated_ += count;
}

int64_t RankJob::open_inputs(RankStatus& status, RankStatus& input_status, std::unique_ptr<LatentSource>& reader,
                             bool& shared) {
  // 0. The model's shape, which says how many values each latent has.
  if (request_.backend.device != DeviceKind::Synthetic) {
    attempt(status, [&] {
      model_file_ = std::make_unique<InputFile>(request_.model_path, InputKind::Model);
      spec_ = read_model_spec(*model_file_);
    });
    require_same_file(world_, topo_, model_file_.get(), &status);
  }
  latents_.latent_dim = spec_.latent_dim;

  // 1. N, read once by rank 0.
  int64_t total = 0;
  if (is_root_) {
    const auto start = Clock::now();
    attempt(input_status, [&] { reader = open_latents(latents_); });
    if (reader) {
      total = reader->count();
      latents_text_ = reader->describe();
    }
    times_.parse += seconds_since(start);
  }
  MPI_Request request;
  MPI_CHECK(MPI_Ibcast(&total, 1, MPI_INT64_T, 0, world_, &request));
  wait_politely(&request);
  // Where every rank can read any images of the source, each reads its own; else rank 0 reads for all.
  const auto share_start = Clock::now();
  shared = share_latents(world_, topo_, latents_, cpu_threads_for_rank(topo_.local_size), &reader, &input_status);
  times_.parse += seconds_since(share_start);
  return total;
}

int RankJob::run_steps() {
  const auto job_start = Clock::now();
  watch_output_folder(request_.output_prefix);  // every rank: a failure its move causes is told as that
  RankStatus status;
  RankStatus input_status;  // rank 0's trouble with the latent file, reported after the model's

  // 0 and 1. The model's shape and N.
  std::unique_ptr<LatentSource> reader;
  bool shared = false;
  const int64_t total = open_inputs(status, input_status, reader, shared);

  // Rank 0, before any backend starts or output exists: one job at a time into the prefix, and
  // nothing replaced that facegen did not write (files/output_guard.hpp).
  SinkOptions sink_options = request_.sinks;
  sink_options.image_channels = spec_.image_channels;
  sink_options.facts = sample_facts(request_);
  RankStatus output_status;
  if (is_root_ && reader) {
    attempt(output_status, [&] {
      guard_ = std::make_unique<OutputGuard>(request_.output_prefix, request_.formats, total,
                                             output_options(sink_options), request_.summary_json_path);
    });
  }
  if (!agree(status) || !agree(input_status) || !agree(output_status)) return exit_code_;

  // 2. How many ranks generate; those start their backends.
  int active = 1;
  if (is_root_) {
    attempt(status, [&] { min_images_ = default_min_images(); });
    active = active_rank_count(total, topo_.world_size, min_images_);
  }
  MPI_CHECK(MPI_Bcast(&active, 1, MPI_INT, 0, world_));
  MPI_CHECK(MPI_Bcast(&min_images_, 1, MPI_INT64_T, 0, world_));
  std::vector<int> node_of_rank(static_cast<size_t>(topo_.world_size));
  MPI_CHECK(MPI_Allgather(&topo_.node_index, 1, MPI_INT, node_of_rank.data(), 1, MPI_INT, world_));
  if (topo_.world_rank < active) attempt(status, [&] { start_backend(active, node_of_rank); });
  if (!agree(status)) return exit_code_;

  // 3. Outputs: checked by all, created by rank 0, opened by all.
  const int64_t round_images = request_.chunk_images > 0 ? request_.chunk_images
                                                         : kDefaultPieceBytes / image_bytes(image_encoding_for(request_.formats), spec_.image_channels);
  WorkSplit split(total, active, round_images);
  if (sink_options.threads <= 0) sink_options.threads = cpu_threads_;
  if (!sink_options.on_notice) sink_options.on_notice = request_.on_notice;
  OrderedOutputs outputs(world_, request_.output_prefix, request_.formats, total, sink_options, split.max_slice());
  outputs.prepare(status);
  if (!agree(status)) return exit_code_;
  attempt(status, [&] { outputs.create(); });
  if (!agree(status)) return exit_code_;
  outputs.open(status);
  if (!agree(status)) return exit_code_;  // files half-open: leave them to MPI_Finalize

  if (options_.verbose) report_ranks(split);
  if (is_root_) {
    if (!notice_.empty() && !options_.quiet) std::fprintf(stderr, "facegen: %s\n", notice_.c_str());
    display_ = std::make_unique<ProgressDisplay>(stderr, request_.progress, total,
                                                 [this] { return progress_->job_images(); });
  }

  // 4. Rounds.
  if (!run_rounds(split, outputs, reader.get(), shared, status)) return exit_code_;

  // 5. Nothing may follow the last number, and no rank's latent file changed; then the files go into place.
  if (reader) attempt(status, [&] { reader->finish(); });
  outputs.finish(status);
  if (!agree(status)) return exit_code_;
  attempt(status, [&] { outputs.commit(); });
  if (!agree(status)) return exit_code_;
  times_.write = outputs.write_seconds();
  times_.total = seconds_since(job_start);
  if (display_) display_->finish();
  const RunSummary summary = gather_summary(split, outputs);
  if (is_root_) attempt(status, [&] { report_summary(summary, request_.summary_json_path, options_.quiet); });
  if (!agree(status)) return exit_code_;
  return 0;
}

bool RankJob::run_rounds(const WorkSplit& split, OrderedOutputs& outputs, LatentSource* reader, bool shared,
                         RankStatus& status) {
  const int64_t slice_capacity = split.max_slice();
  // Round q+1 is read on a thread of its own while round q is generated and written, so that parsing
  // text latents hides behind the work instead of adding to it: by every rank its own slice, or by
  // rank 0 the whole round, which it then scatters.
  const bool reads = shared || is_root_;
  if (shared && reader) reader->set_threads(cpu_threads_);
  std::vector<float> round_latents[2];  // (slice or round images, nz), one being read, one in use
  std::future<void> next_round;
  auto start_reading = [&](int64_t q) {
    const ImageRange part = shared ? split.slice(q, topo_.world_rank) : split.round(q);
    next_round = std::async(std::launch::async, [reader, &round_latents, part, shared, q] {
      if (shared) {
        reader->read_range(part.begin, part.size(), round_latents[q % 2].data());
      } else {
        reader->read(round_latents[q % 2].data(), part.size());
      }
    });
  };
  if (reads) {
    // A round is at most the active ranks' largest slices (each at most the chunk), and at most N.
    const int64_t images = shared ? slice_capacity : std::min(split.total_images(), slice_capacity * split.active_ranks());
    for (auto& buffer : round_latents) buffer.resize(static_cast<size_t>(images) * latents_.latent_dim);
    if (split.rounds() > 0) start_reading(0);
  }
  std::vector<float> latents(shared ? 0 : static_cast<size_t>(slice_capacity) * latents_.latent_dim);  // (slice, nz)
  std::vector<int> counts(static_cast<size_t>(topo_.world_size));
  std::vector<int> displacements(static_cast<size_t>(topo_.world_size));
  MPI_Request request;
  for (int64_t q = 0; q < split.rounds(); ++q) {
    const ImageRange round = split.round(q);
    if (reads) {
      const auto start = Clock::now();
      attempt(status, [&] { next_round.get(); });  // rethrows what the reading thread threw
      times_.parse += seconds_since(start);  // only the wait: what reading did not hide
      if (!status.failed && q + 1 < split.rounds()) start_reading(q + 1);
    }
    // Agreeing here also stops the job after a failed generate or write of an earlier round.
    outputs.collect_errors(status);
    if (!agree(status)) {
      outputs.finish(status);
      return false;
    }
    const ImageRange mine = split.slice(q, topo_.world_rank);
    const float* my_latents = shared ? round_latents[q % 2].data() : latents.data();  // (slice, nz)
    if (!shared) {
      for (int r = 0; r < topo_.world_size; ++r) {
        const ImageRange slice = split.slice(q, r);
        counts[static_cast<size_t>(r)] = static_cast<int>(slice.size() * latents_.latent_dim);
        displacements[static_cast<size_t>(r)] = static_cast<int>((slice.begin - round.begin) * latents_.latent_dim);
      }
      MPI_CHECK(MPI_Iscatterv(round_latents[q % 2].data(), counts.data(), displacements.data(), MPI_FLOAT,
                              latents.data(), counts[static_cast<size_t>(topo_.world_rank)], MPI_FLOAT, 0, world_,
                              &request));
      wait_politely(&request);
    }
    // (slice, 64, 64, nc); written by the outputs' writer thread while the next round is generated.
    void* images = outputs.next_buffer();
    if (!mine.empty()) {
      const auto start = Clock::now();
      attempt(status, [&] {
        if (q == 0) maybe_inject_fault(topo_.world_rank);
        generate_slice(my_latents, mine.size(), mine.begin, outputs.encoding(), images);
      });
      times_.compute += seconds_since(start);
    }
    outputs.submit_round(images, round, mine, status);
  }
  return true;
}

void RankJob::report_ranks(const WorkSplit& split) {
  constexpr int kLine = 512;
  char line[kLine];
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string work = backend_ ? "  " + std::to_string(split.rank_total(topo_.world_rank)) + " images" : "";
  std::snprintf(line, sizeof line, "rank %d of %d  host %s  local rank %d of %d  %s%s%s%s", topo_.world_rank,
                topo_.world_size, topo_.host.c_str(), topo_.local_rank, topo_.local_size, backend_text_.c_str(),
                work.c_str(), visible ? "  CUDA_VISIBLE_DEVICES=" : "", visible ? visible : "");
  std::vector<char> all(is_root_ ? static_cast<size_t>(kLine) * topo_.world_size : 0);
  MPI_CHECK(MPI_Gather(line, kLine, MPI_CHAR, all.data(), kLine, MPI_CHAR, 0, world_));
  if (!is_root_) return;
  for (int r = 0; r < topo_.world_size; ++r) std::printf("%s\n", all.data() + static_cast<size_t>(r) * kLine);
  std::fflush(stdout);
}

// One rank's figures as they travel to rank 0 (MPI_BYTE: the ranks of a job share one build).
struct RankRow {
  Times times;
  int64_t images;
  int64_t peak_memory;
  char host[64];
  char backend[160];
};

RunSummary RankJob::gather_summary(const WorkSplit& split, const OrderedOutputs& outputs) {
  Times slowest;
  MPI_CHECK(MPI_Reduce(&times_, &slowest, kTimeFields, MPI_DOUBLE, MPI_MAX, 0, world_));
  RankRow mine{};
  mine.times = times_;
  mine.images = generated_;
  mine.peak_memory = peak_resident_bytes();
  std::snprintf(mine.host, sizeof mine.host, "%s", topo_.host.c_str());
  std::snprintf(mine.backend, sizeof mine.backend, "%s", backend_text_.c_str());
  std::vector<RankRow> rows(is_root_ ? static_cast<size_t>(topo_.world_size) : 0);
  MPI_CHECK(MPI_Gather(&mine, sizeof mine, MPI_BYTE, rows.data(), sizeof mine, MPI_BYTE, 0, world_));
  RunSummary s;
  if (!is_root_) return s;

  const int64_t total = split.total_images();
  const int active = split.active_ranks();
  char text[512];
  if (active == topo_.world_size) {
    int64_t fewest = total, most = 0;
    for (int r = 0; r < active; ++r) {
      fewest = std::min(fewest, split.rank_total(r));
      most = std::max(most, split.rank_total(r));
    }
    if (fewest == most) {
      std::snprintf(text, sizeof text, "all generate, %lld images each", static_cast<long long>(most));
    } else {
      std::snprintf(text, sizeof text, "all generate, %lld to %lld images each", static_cast<long long>(fewest),
                    static_cast<long long>(most));
    }
  } else {
    std::snprintf(text, sizeof text,
                  "%d generate%s, %d sit%s out (a rank needs %lld images to pay for its start-up; --all-ranks to use "
                  "every rank)",
                  active, active == 1 ? "s" : "", topo_.world_size - active, topo_.world_size - active == 1 ? "s" : "",
                  static_cast<long long>(min_images_));
  }
  s.ranks_note = text;
  std::snprintf(text, sizeof text, "; %lld round%s of at most %lld images per rank", static_cast<long long>(split.rounds()),
                split.rounds() == 1 ? "" : "s", static_cast<long long>(request_.chunk_images));
  s.ranks_note += text;
  s.model = request_.model_path;
  if (guard_) s.stale = guard_->stale();
  s.latents = latents_text_;
  s.seeds = request_.latents.seeds;
  s.images = total;
  s.device = device_;
  s.precision = device_ == "cuda" ? precision_name(request_.backend.precision) : "fp32";
  s.backend = "rank 0: " + backend_text_ + (options_.verbose ? "" : " (--verbose: every rank)");
  s.ranks = topo_.world_size;
  s.hosts = topo_.node_count;
  s.generating_ranks = active;
  s.load_seconds = slowest.startup;
  double written = 0;
  for (const std::string& path : outputs.final_paths()) {
    s.files.push_back({path, file_bytes(path)});
    written += static_cast<double>(s.files.back().bytes);
  }
  s.stages = {
      {"parse", slowest.parse, 0, "slowest rank, the part not hidden behind generation"},
      {"generate", slowest.compute, 0, "slowest rank, not counting reading and writing files"},
      {"write", slowest.write, written, "slowest rank: formatting, converting and MPI-IO on its writer thread, beside generation"},
  };
  s.total_seconds = times_.total;
  s.peak_memory_bytes = mine.peak_memory;
  for (int r = 0; r < topo_.world_size; ++r) {
    const RankRow& row = rows[static_cast<size_t>(r)];
    RankFigures f;
    f.rank = r;
    f.host = row.host;
    f.backend = row.backend;
    f.images = row.images;
    f.startup_seconds = row.times.startup;
    f.parse_seconds = row.times.parse;
    f.compute_seconds = row.times.compute;
    f.write_seconds = row.times.write;
    f.total_seconds = row.times.total;
    f.peak_memory_bytes = row.peak_memory;
    s.per_rank.push_back(f);
  }
  return s;
}

}  // namespace

bool mpi_available() { return true; }

int end_rank_before_job(int status) {
  ::setenv("OMPI_MCA_sharedfp", "individual", 0);
  if (MPI_Init(nullptr, nullptr) != MPI_SUCCESS) return status;
  MPI_Request barrier;
  if (MPI_Ibarrier(MPI_COMM_WORLD, &barrier) == MPI_SUCCESS) {
    // A rank whose checks passed is in the job, not here: give up waiting rather than hang.
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    int done = 0;
    while (!done && Clock::now() < deadline) {
      if (MPI_Test(&barrier, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
      if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (!done) return status;  // without MPI_Finalize, which would wait for the others
  }
  MPI_Finalize();
  return status;
}

int run_as_rank(const GenerateRequest& request, const RankJobOptions& options) {
  // OpenMPI's MPI-IO picks a shared-file-pointer component at every MPI_File_open, though this
  // program never uses the shared pointer. In OpenMPI 4.1 two of them format the file's name into a
  // fixed buffer: "sm" (a file in the session directory named after the file) and "lockedfile" (a
  // lock file beside it); a name of about 200 bytes overflows it and glibc aborts the rank ("buffer
  // overflow detected"). "lockedfile" also leaves PATH.locktest.N beside the file when a rank is
  // stopped inside the open. "individual" sizes its names to the path: it keeps PATH.data.0 and
  // PATH.metadata.0 beside an open file (each rank opens its own handle: rank 0 of MPI_COMM_SELF),
  // which the output driver lists for a signal's cleanup (mpi/ordered_output.cpp). It is the one asked for, unless the user chose one.
  ::setenv("OMPI_MCA_sharedfp", "individual", 0);
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    std::fprintf(stderr, "facegen: error: MPI_Init failed\n");
    return kExitFault;
  }
  MPI_Comm world;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &world));
  MPI_CHECK(MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN));
  RankTopology topo = discover_topology(world);
  set_identity(topo.world_rank, topo.host);
  // mpirun and srun stop the other ranks with SIGTERM (then SIGKILL) when one fails; Ctrl-C is SIGINT.
  install_stop_handlers(StopStyle::DieOfSignal);

  int code = kExitFault;
  try {
    RankJob job(world, topo, request, options);
    code = job.run();
  } catch (const std::exception& e) {
    // A bug outside any agreement point: the other ranks may be waiting in a collective.
    print_rank_error(std::string("internal error: ") + e.what());
    remove_registered_temps(nullptr);  // MPI_Abort runs no destructor
    MPI_Abort(MPI_COMM_WORLD, kExitFault);
  }
  MPI_Comm_free(&world);
  MPI_Finalize();
  return code;
}

}  // namespace mpi
}  // namespace facegen
