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
#include <filesystem>
#include <future>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.hpp"
#include "common/work_pool.hpp"
#include "engine/output_engine.hpp"
#include "engine/piece_loop.hpp"
#include "engine/piece_plan.hpp"
#include "commit/commit_journal.hpp"
#include "engine/image_sink.hpp"
#include "common/path_parts.hpp"
#include "commit/output_guard.hpp"
#include "common/stop_signals.hpp"
#include "common/temp_registry.hpp"
#include "generator/backend.hpp"
#include "generator/finite_check.hpp"
#include "common/errors.hpp"
#include "latents/input_file.hpp"
#include "latents/latent_source.hpp"
#include "generator/network.hpp"
#include "common/text_format.hpp"
#include "run/progress.hpp"
#include "run/resume_job.hpp"
#include "run/summary.hpp"
#include "mpi/agreement.hpp"
#include "mpi/job_progress.hpp"
#include "mpi/mpi_check.hpp"
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
  double write = 0;    // its engine's tasks' time: records, pixels, writes (summed over threads)
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
  // Step 3: this rank's sinks for its share (rank 0 first: its folder of PNGs is every rank's).
  void make_outputs(const SinkOptions& sink_options, RankStatus& status);
  // Step 4: the share's pieces generated and written; errors go into `status`.
  void run_share(LatentSource& reader, RankStatus& status);
  // Step 5: every rank's renames to rank 0, which puts the whole set in place. False when the ranks
  // agreed to stop (exit_code_ says why).
  bool commit_outputs(RankStatus& status);
  RunSummary gather_summary();
  // --resume, after rank 0 read the manifest (prepare_resume): its verdict to every rank, each with
  // its own part of the manifest. Collective.
  void share_resume_verdict(const OutputOptions& layout, int64_t unit);
  bool agree(const RankStatus& status) { return ranks_agree(world_, status, &exit_code_, &failure_message_); }
  void broadcast_text(std::string& text);  // collective: rank 0's text to every rank
  int64_t default_min_images() const;
  void start_backend(int active, const std::vector<int>& node_of_rank);
  void report_ranks();

  MPI_Comm world_;
  RankTopology topo_;
  const GenerateRequest& request_;
  RankJobOptions options_;
  int exit_code_ = 0;
  std::string failure_message_;  // the failing rank's, as it printed it
  bool outputs_in_place_ = false;  // the commit is done
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
  std::string device_ = "cpu";  // "cuda", "cpu", "synthetic": the device this rank's backend runs on
  int64_t total_ = 0;           // N
  std::optional<WorkSplit> split_;  // of N's images; with --resume, of the images of the units still missing
  ImageRange share_;            // the images this rank generates and writes (with --resume, of those units)
  std::unique_ptr<ResumeFiles> resume_;  // --resume: every rank's, rank 0's verdict on the manifest
  std::vector<int64_t> units_;           // --resume: the units this rank makes
  std::vector<std::unique_ptr<ImageSink>> sinks_;  // this rank's share of every output
  std::vector<std::unique_ptr<TempRegistration>> handed_over_;  // rank 0: the other ranks' temporaries
  std::vector<std::string> handed_over_paths_;                  // rank 0: their paths, removed unless committed
  std::vector<std::pair<size_t, std::string>> committed_finals_;  // rank 0: (output, final path) of every file
  std::unique_ptr<JobProgress> progress_;
  std::unique_ptr<ProgressDisplay> display_;  // rank 0
  std::unique_ptr<OutputGuard> guard_;         // rank 0: the prefix's lock, until the outputs are in place
  OutputOptions layout_options_;               // the outputs' layout, for the summary
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
  device_ = device_name(backend.device);
  backend.images_done = &progress_->own_count();
  backend.images = image_encoding_for(request_.formats);  // the engine's buffers hold them so
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
  if (code != 0 && is_root_) {
    report_failure_json({code, failure_message_, request_.output_prefix, request_.formats, request_.resume,
                         outputs_in_place_},
                        request_.summary_json_path);
  }
  return code;
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
  // nothing replaced that facegen did not write (commit/output_guard.hpp).
  SinkOptions sink_options = request_.sinks;
  sink_options.image_channels = spec_.image_channels;
  sink_options.image_size = spec_.image_size;
  attempt(status, [&] { sink_options.facts = sample_facts(request_, model_file_.get()); });
  RankStatus output_status;
  total_ = total;
  const OutputOptions layout = output_options(sink_options);
  layout_options_ = layout;
  layout_options_.on_notice = nullptr;
  const int64_t unit = unit_images_for(request_.formats, layout, total);
  if (is_root_ && reader) {
    attempt(output_status, [&] {
      guard_ = std::make_unique<OutputGuard>(request_.output_prefix, request_.formats, total, layout,
                                             request_.summary_json_path);
      // --resume: the manifest read, the job compared, the recorded files checked, under the lock.
      if (!request_.resume) return;
      const std::string device = device_name(choose_device(request_.backend, topo_.local_rank).options.device);
      const JobDescription job = resume_job_description(request_, device, *reader, layout, total, unit);
      resume_ = prepare_resume(request_.output_prefix, job, request_.formats, layout, total, unit,
                               cpu_threads_for_rank(topo_.local_size), request_.on_notice);
    });
  }
  if (!agree(status) || !agree(input_status) || !agree(output_status)) return exit_code_;
  if (request_.resume) share_resume_verdict(layout, unit);

  // 2. How many ranks generate, and which images each: whole blocks, so that no two ranks share a
  // file; everything on rank 0 where the ranks cannot each read their own latents (a pipe). Those
  // ranks start their backends.
  // --resume: the units still missing, laid end to end, are the work shared (in blocks of a unit:
  // only the job's last unit can be shorter, and it comes last).
  std::vector<int64_t> missing;
  int64_t work = total;
  if (resume_) {
    missing = resume_->units_to_make();
    work = 0;
    for (int64_t u : missing) work += std::min(total, (u + 1) * unit) - u * unit;
  }
  int active = 1;
  if (is_root_) {
    attempt(status, [&] { min_images_ = default_min_images(); });
    active = active_rank_count(work, topo_.world_size, min_images_);
  }
  MPI_CHECK(MPI_Bcast(&active, 1, MPI_INT, 0, world_));
  MPI_CHECK(MPI_Bcast(&min_images_, 1, MPI_INT64_T, 0, world_));
  const int64_t block = resume_ ? unit
                        : shared ? split_unit_images(request_.formats, layout, total)
                                 : std::max<int64_t>(1, total);
  split_.emplace(work, active, block);
  share_ = split_->share(topo_.world_rank);
  active = split_->active_ranks();
  if (resume_ && !share_.empty()) {
    units_.assign(missing.begin() + share_.begin / unit, missing.begin() + (share_.end + unit - 1) / unit);
  }
  std::vector<int> node_of_rank(static_cast<size_t>(topo_.world_size));
  MPI_CHECK(MPI_Allgather(&topo_.node_index, 1, MPI_INT, node_of_rank.data(), 1, MPI_INT, world_));
  if (topo_.world_rank < active) attempt(status, [&] { start_backend(active, node_of_rank); });
  if (!agree(status)) return exit_code_;

  // 3. Outputs: each rank makes the files of its share, as temporaries.
  if (sink_options.threads <= 0) sink_options.threads = cpu_threads_;
  if (!sink_options.on_notice) sink_options.on_notice = request_.on_notice;
  make_outputs(sink_options, status);
  if (!agree(status)) return exit_code_;

  if (options_.verbose) report_ranks();
  if (is_root_) {
    if (!notice_.empty() && !options_.quiet) std::fprintf(stderr, "facegen: %s\n", notice_.c_str());
    display_ = std::make_unique<ProgressDisplay>(stderr, request_.progress, split_->total_images(),
                                                 [this] { return progress_->job_images(); });
  }

  // 4. Each rank its share, on its own: the ranks meet again at the commit.
  if (backend_ && !share_.empty() && reader) run_share(*reader, status);

  // 5. Nothing may follow the last number, and no rank's latent file changed; then the files go into place.
  if (reader && (shared || is_root_)) attempt(status, [&] { reader->finish(); });
  if (!commit_outputs(status)) return exit_code_;
  outputs_in_place_ = true;
  times_.total = seconds_since(job_start);
  if (display_) display_->finish();
  const RunSummary summary = gather_summary();
  if (is_root_) attempt(status, [&] { report_summary(summary, request_.summary_json_path, options_.quiet); });
  if (!agree(status)) return exit_code_;
  return 0;
}

// Rank 0 first: a commit of an earlier run into this directory that a kill cut short is finished,
// then its files (and the folder of PNGs, whose temporary path every rank then writes into). Every
// other rank then checks that it sees rank 0's first file (the outputs' folder is one folder for the
// whole job, which the commit needs) and makes the files of its own share.
void RankJob::make_outputs(const SinkOptions& sink_options, RankStatus& status) {
  SinkOptions options = sink_options;
  options.share_first = share_.begin;
  options.share_end = share_.end;
  if (resume_) {  // each rank's files of its units, put in place as each is finished
    options.share_first = 0;
    options.share_end = -1;
    options.resume = resume_.get();
  }
  if (!is_root_) options.on_notice = nullptr;
  std::string folder, probe;  // rank 0's folder of PNGs and first temporary file
  if (is_root_) {
    stop_for_test("outputs-open");
    attempt(status, [&] {
      for (const std::string& sentence : finish_dead_commits(directory_of(request_.output_prefix))) {
        if (options.on_notice) options.on_notice(sentence);
      }
      for (OutputFormat format : request_.formats) {
        sinks_.push_back(make_sink(format, request_.output_prefix, total_, options));
        if (format == OutputFormat::Png) folder = sinks_.back()->temp_folder();
        if (probe.empty()) probe = sinks_.back()->first_temp();
      }
      if (resume_) probe = resume_manifest_path(request_.output_prefix);  // no file is made before its images
    });
  }
  broadcast_text(folder);
  broadcast_text(probe);
  int made = status.failed ? 0 : 1;
  int all_made = 0;
  MPI_CHECK(MPI_Allreduce(&made, &all_made, 1, MPI_INT, MPI_MIN, world_));
  if (!all_made) return;
  if (!is_root_) {
    stop_for_test("outputs-open");
    attempt(status, [&] {
      struct stat st;
      if (!probe.empty() && ::stat(probe.c_str(), &st) != 0) {
        throw UserError("the outputs' folder " + directory_of(request_.output_prefix) +
                        " here is not rank 0's: its file " + base_name(probe) +
                        " is not there (every rank must see one folder, on a file system every node shares)");
      }
      options.shared_folder = folder;
      for (OutputFormat format : request_.formats) {
        sinks_.push_back(make_sink(format, request_.output_prefix, total_, options));
      }
    });
  }
  stop_for_test("outputs-checked");  // every rank's first files are made (or it failed)
}

void RankJob::share_resume_verdict(const OutputOptions& layout, int64_t unit) {
  std::vector<uint8_t> kept;
  if (is_root_) kept = resume_->kept_bytes();
  int64_t bytes = static_cast<int64_t>(kept.size());
  MPI_CHECK(MPI_Bcast(&bytes, 1, MPI_INT64_T, 0, world_));
  kept.resize(static_cast<size_t>(bytes));
  constexpr int64_t kPiece = int64_t{1} << 30;  // MPI counts are ints
  for (int64_t at = 0; at < bytes; at += kPiece) {
    MPI_CHECK(MPI_Bcast(kept.data() + at, static_cast<int>(std::min(kPiece, bytes - at)), MPI_BYTE, 0, world_));
  }
  if (is_root_) return;
  resume_ = std::make_unique<ResumeFiles>(resume_layouts(request_.output_prefix, request_.formats, layout, total_), unit,
                                          std::make_unique<ManifestAppender>(request_.output_prefix, topo_.world_rank));
  resume_->set_kept_bytes(std::move(kept));
}

void RankJob::broadcast_text(std::string& text) {
  int64_t length = static_cast<int64_t>(text.size());
  MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT64_T, 0, world_));
  text.resize(static_cast<size_t>(length));
  MPI_CHECK(MPI_Bcast(text.data(), static_cast<int>(length), MPI_CHAR, 0, world_));
}

void RankJob::run_share(LatentSource& reader, RankStatus& status) {
  const ImageEncoding encoding = image_encoding_for(request_.formats);
  std::vector<ImageSink*> outputs;
  for (auto& sink : sinks_) outputs.push_back(sink.get());
  const OutputOptions layout = output_options(request_.sinks);
  const JobFlow flow = job_flow(request_.formats, layout, total_, cpu_threads_,
                                image_bytes(encoding, spec_.image_channels, spec_.image_size), request_.chunk_images,
                                needs_image_order(request_.formats, reader.random_access()));
  // The share is whole blocks, each whole units where the units are files (a block is a multiple of
  // every output's file); where the unit is all of N (one file, a folder of PNGs) the share is one.
  // With --resume, the units of this rank's share of those still missing.
  PiecePlan plan = resume_ ? PiecePlan(total_, flow.unit_images, flow.piece_images, flow.lanes, units_)
                           : PiecePlan(total_, flow.unit_images, flow.piece_images, flow.lanes, share_.begin, share_.end);
  EngineOptions engine_options;
  engine_options.piece_images = flow.piece_images;
  engine_options.buffers = flow.buffers;
  engine_options.threads = cpu_threads_;
  engine_options.encoding = encoding;
  engine_options.image_channels = spec_.image_channels;
  engine_options.image_size = spec_.image_size;
  engine_options.allocate = [this](size_t bytes) { return backend_->allocate_host(bytes); };
  engine_options.encoded_runs = backend_->makes_encoded_runs();
  attempt(status, [&] {
    OutputEngine engine(outputs, engine_options);
    PieceLoop loop{*backend_, engine, plan, reader, flow.buffers, *net_, request_.model_path, cpu_threads_,
                   nullptr, nullptr};
    loop.first_piece = [this] { maybe_inject_fault(topo_.world_rank); };
    // Exact after each piece, whether or not the backend counted its passes as it went (set, not added).
    int64_t pieces_done = 0;
    loop.generated = [this, &pieces_done](int64_t count) {
      progress_->own_count().store(pieces_done += count, std::memory_order_relaxed);
      progress_->publish();
    };
    const PieceLoopSeconds seconds = run_piece_loop(loop);
    times_.parse += seconds.parse;
    times_.compute += seconds.compute;
    engine.finish();
    times_.write = engine.write_seconds();
  });
}

bool RankJob::commit_outputs(RankStatus& status) {
  // Every byte of this rank's files on the storage; its renames, two lines each: "FOLDER KIND OUTPUT
  // TEMP", then FINAL (OUTPUT: the output's place in the formats given).
  std::string mine;
  attempt(status, [&] {
    for (size_t o = 0; o < sinks_.size(); ++o) {
      for (const PendingRename& rename : sinks_[o]->finish()) {
        mine += std::to_string(rename.folder) + ' ' + std::to_string(static_cast<int>(rename.kind)) + ' ' +
                std::to_string(o) + ' ' + rename.temp + '\n' + rename.final + '\n';
      }
    }
  });
  if (!agree(status)) return false;
  // Rank 0 takes the other ranks' temporaries over (listed for a signal's cleanup, removed if the
  // commit does not happen); then they let go of them, and rank 0 commits the whole set.
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(is_root_ ? static_cast<size_t>(topo_.world_size) : 0);
  MPI_CHECK(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, world_));
  std::vector<int> offsets(lengths.size(), 0);
  for (size_t r = 1; r < lengths.size(); ++r) offsets[r] = offsets[r - 1] + lengths[r - 1];
  std::string all(is_root_ ? static_cast<size_t>(offsets.empty() ? 0 : offsets.back() + lengths.back()) : 0, '\0');
  MPI_CHECK(MPI_Gatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, 0, world_));
  std::vector<PendingRename> renames;
  if (is_root_) {
    attempt(status, [&] {
      for (int r = 0; r < topo_.world_size; ++r) {
        std::istringstream lines(all.substr(static_cast<size_t>(offsets[r]), static_cast<size_t>(lengths[r])));
        for (std::string head, final; std::getline(lines, head) && std::getline(lines, final);) {
          PendingRename rename;
          std::istringstream fields(head);
          int folder = 0, kind = 0;
          size_t output = 0;
          fields >> folder >> kind >> output;
          fields.get();
          std::getline(fields, rename.temp);
          rename.folder = folder != 0;
          rename.kind = static_cast<WrittenKind>(kind);
          rename.final = final;
          committed_finals_.emplace_back(output, final);
          if (r != 0) {  // another rank's: rank 0 answers for it from here on
            handed_over_.push_back(std::make_unique<TempRegistration>(
                register_temp_path(rename.temp, rename.folder ? TempKind::Folder : TempKind::File)));
            handed_over_paths_.push_back(rename.temp);
          }
          renames.push_back(rename);
        }
      }
    });
  }
  if (!agree(status)) return false;
  if (!is_root_) {
    for (auto& sink : sinks_) sink->committed();  // rank 0's now
  }
  if (is_root_) {
    attempt(status, [&] {
      commit_all_or_nothing(renames);
      for (auto& sink : sinks_) sink->committed();
      handed_over_paths_.clear();  // in place: nothing to remove
    });
  }
  // A commit that did not happen: the other ranks' temporaries go too.
  for (const std::string& path : handed_over_paths_) {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  handed_over_.clear();
  return agree(status);
}

void RankJob::report_ranks() {
  constexpr int kLine = 512;
  char line[kLine];
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string work = backend_ ? "  " + std::to_string(share_.size()) + " images" : "";
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
  int64_t made_files;  // --resume
  int64_t peak_memory;
  char host[64];
  char backend[160];
};

RunSummary RankJob::gather_summary() {
  Times slowest;
  MPI_CHECK(MPI_Reduce(&times_, &slowest, kTimeFields, MPI_DOUBLE, MPI_MAX, 0, world_));
  RankRow mine{};
  mine.times = times_;
  mine.images = backend_ ? share_.size() : 0;
  mine.made_files = resume_ ? resume_->made_files() : 0;
  mine.peak_memory = peak_resident_bytes();
  std::snprintf(mine.host, sizeof mine.host, "%s", topo_.host.c_str());
  std::snprintf(mine.backend, sizeof mine.backend, "%s", backend_text_.c_str());
  std::vector<RankRow> rows(is_root_ ? static_cast<size_t>(topo_.world_size) : 0);
  MPI_CHECK(MPI_Gather(&mine, sizeof mine, MPI_BYTE, rows.data(), sizeof mine, MPI_BYTE, 0, world_));
  RunSummary s;
  if (!is_root_) return s;

  const int64_t total = split_->total_images();
  const int active = split_->active_ranks();
  char text[512];
  if (active == topo_.world_size) {
    int64_t fewest = total, most = 0;
    for (int r = 0; r < active; ++r) {
      fewest = std::min(fewest, split_->share(r).size());
      most = std::max(most, split_->share(r).size());
    }
    if (fewest == most) {
      std::snprintf(text, sizeof text, "all generate, %lld images each", static_cast<long long>(most));
    } else {
      std::snprintf(text, sizeof text, "all generate, %lld to %lld images each", static_cast<long long>(fewest),
                    static_cast<long long>(most));
    }
  } else if (active == split_->blocks() && split_->blocks() < topo_.world_size) {
    std::snprintf(text, sizeof text, "%d generate%s, %d sit%s out (the job has %lld block%s)", active,
                  active == 1 ? "s" : "", topo_.world_size - active, topo_.world_size - active == 1 ? "s" : "",
                  static_cast<long long>(split_->blocks()), split_->blocks() == 1 ? "" : "s");
  } else {
    std::snprintf(text, sizeof text,
                  "%d generate%s, %d sit%s out (a rank needs %lld images to pay for its start-up; --all-ranks to use "
                  "every rank)",
                  active, active == 1 ? "s" : "", topo_.world_size - active, topo_.world_size - active == 1 ? "s" : "",
                  static_cast<long long>(min_images_));
  }
  s.ranks_note = text;
  std::snprintf(text, sizeof text, "; shares of whole blocks of %lld image%s, where no two ranks share a file",
                static_cast<long long>(split_->block_images()), split_->block_images() == 1 ? "" : "s");
  s.ranks_note += text;
  s.model = request_.model_path;
  s.model_xxh3 = layout_options_.facts.model_xxh3;
  s.output_prefix = request_.output_prefix;
  if (guard_) s.stale = guard_->stale();
  s.latents = latents_text_;
  s.seeds = request_.latents.seeds;
  s.truncation = request_.latents.truncation;
  s.images = total;
  s.device = device_;
  s.precision = device_ == "cuda" ? precision_name(request_.backend.precision) : "fp32";
  s.backend = "rank 0: " + backend_text_ + (options_.verbose ? "" : " (--verbose: every rank)");
  s.ranks = topo_.world_size;
  s.hosts = topo_.node_count;
  s.generating_ranks = active;
  s.load_seconds = slowest.startup;
  if (resume_) {
    s.resumed = ResumedFiles{resume_manifest_path(request_.output_prefix), total_, resume_->kept_files(), 0};
    for (const RankRow& row : rows) s.resumed->made_files += row.made_files;
  }
  double written = 0;
  for (size_t o = 0; o < sinks_.size(); ++o) {
    int64_t bytes = 0;
    for (const auto& [output, path] : committed_finals_) bytes += output == o ? file_bytes(path) : 0;
    if (resume_) {  // every file of the output, kept or made
      for (const std::string& path : sinks_[o]->final_paths()) bytes += file_bytes(path);
    }
    s.outputs.push_back({OutputLayout(request_.formats[o], request_.output_prefix, total_, layout_options_), bytes});
    written += static_cast<double>(bytes);
  }
  s.stages = {
      {"parse", slowest.parse, 0, "slowest rank, the part not hidden behind generation"},
      {"generate", slowest.compute, 0, "slowest rank, not counting reading and writing files"},
      {"write", slowest.write, written, "slowest rank, summed over its pool's threads, beside generation"},
  };
  s.total_seconds = times_.total;
  s.peak_memory_bytes = mine.peak_memory;
  s.cpu_seconds = process_cpu_seconds();
  s.threads_started = WorkPool::threads_started();
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
  // Each rank's CUDA sees its own GPU alone (the one choose_device would take: local rank modulo the
  // GPUs), so that a rank starts one context, not one for every GPU of its node.
  const DeviceKind device = request.backend.device;
  if (device == DeviceKind::Cuda || device == DeviceKind::Auto) {
    see_only_gpu(topo.local_rank % std::max(1, visible_gpu_count()));
  }
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
