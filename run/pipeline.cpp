// pipeline.cpp: one generation job in one process (see pipeline.hpp for the order of work).
#include "run/pipeline.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "common/clock.hpp"
#include "common/errors.hpp"
#include "common/model_shape.hpp"
#include "common/precision.hpp"
#include "common/threads.hpp"
#include "commit/commit_journal.hpp"
#include "commit/output_guard.hpp"
#include "common/path_parts.hpp"
#include "generator/finite_check.hpp"
#include "common/work_pool.hpp"
#include "engine/piece_loop.hpp"
#include "engine/output_engine.hpp"
#include "engine/piece_plan.hpp"
#include "run/resume_job.hpp"

namespace facegen {
namespace {

// What the run knows before it writes: the model, the latents and their count, the sinks' options.
struct Prepared {
  const Network& net;
  LatentSource& reader;
  int64_t total;
  SinkOptions sink_options;
  double parse_seconds;  // so far
  Clock::time_point run_start;
  EarlyCudaContext* context;  // being created beside the reading, or null
};

// The backend for the job, its buffers sized to the job; the start-up times, device, backend and
// precision go into `summary`. device_notice: the CPU fallback's notice, said once the first latents
// are read (where the input or the outputs are wrong, that one line is what the user reads).
std::unique_ptr<Backend> start_job_backend(const GenerateRequest& request, const Prepared& run,
                                           std::atomic<int64_t>& generated, ImageEncoding encoding,
                                           std::string& device_notice, RunSummary& summary) {
  BackendOptions options = request.backend;
  options.images_done = &generated;
  options.images = encoding;
  options.max_batch = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(options.max_batch, run.total)));
  const double waited = run.context ? run.context->wait() : 0;
  if (run.context) summary.startup.push_back({"cuda_context_wait", waited, 0, ""});
  const auto start = Clock::now();
  std::unique_ptr<Backend> backend = make_backend(run.net, options, &device_notice);
  const double backend_seconds = seconds_since(start);
  summary.startup.push_back({"backend", backend_seconds, 0, ""});
  DeviceKind device = request.backend.device;
  if (device == DeviceKind::Auto) device = device_notice.empty() ? DeviceKind::Cuda : DeviceKind::Cpu;  // a notice: fell back
  summary.device = device_name(device);
  summary.backend = backend->describe();
  summary.precision = summary.device == "cuda" ? precision_name(request.backend.precision) : "fp32";
  summary.model = request.model_path;
  summary.load_seconds += waited + backend_seconds;
  return backend;
}

// The files, their sizes and the stages' times into `summary`, once the outputs are in place.
void summarize_run(const GenerateRequest& request, const Prepared& run, const std::vector<std::unique_ptr<ImageSink>>& sinks,
                   const OutputEngine& engine, PieceLoopSeconds seconds, RunSummary& summary) {
  summary.images = run.total;
  summary.latents = run.reader.describe();
  summary.seeds = request.latents.seeds;
  summary.truncation = request.latents.truncation;
  double written_bytes = 0;
  OutputOptions layout_options = output_options(run.sink_options);
  layout_options.on_notice = nullptr;  // told when the sinks were made
  summary.output_prefix = request.output_prefix;
  for (size_t o = 0; o < sinks.size(); ++o) {
    // Sizes on disk, as the MPI driver reports them; the bytes written where no path is known.
    const ImageSink& sink = *sinks[o];
    int64_t bytes = 0;
    for (const std::string& path : sink.final_paths()) bytes += file_bytes(path);
    if (sink.final_paths().empty()) bytes = sink.bytes_written();
    summary.outputs.push_back({OutputLayout(request.formats[o], request.output_prefix, run.total, layout_options), bytes});
    written_bytes += static_cast<double>(bytes);
  }
  // The file as it was opened (its path may name another file by now, or none).
  const double input_bytes = static_cast<double>(std::max<int64_t>(0, run.reader.file_bytes()));
  char wait_text[32];
  std::snprintf(wait_text, sizeof wait_text, "%.3f s", engine.wait_seconds());
  summary.stages = {
      {"parse", seconds.parse, input_bytes, ""},
      {"generate", seconds.compute, 0, "not counting reading and writing files"},
      {"write", engine.write_seconds(), written_bytes,
       "summed over the pool's threads, beside generation; generation waited " + std::string(wait_text) +
           " for a free buffer"},
  };
  summary.total_seconds = seconds_since(run.run_start);
  summary.peak_memory_bytes = peak_resident_bytes();
  summary.threads_started = WorkPool::threads_started();
  summary.cpu_seconds = process_cpu_seconds();
}

// The backend, the outputs (as temporaries), the pieces generated and written, the commit; fills
// `summary` in.
void generate_into_outputs(const GenerateRequest& request, const Prepared& run, std::atomic<int64_t>& generated,
                           RunSummary& summary) {
  const ImageEncoding encoding = image_encoding_for(request.formats);
  std::string device_notice;
  std::unique_ptr<Backend> backend = start_job_backend(request, run, generated, encoding, device_notice, summary);

  // A commit of an earlier run into this directory that a kill cut short is finished first.
  for (const std::string& sentence : finish_dead_commits(directory_of(request.output_prefix))) {
    if (request.on_notice) request.on_notice(sentence);
  }
  const ModelSpec& spec = run.net.spec();
  SinkOptions sink_options = run.sink_options;
  const OutputOptions layout_options = output_options(sink_options);
  const JobFlow flow = job_flow(request.formats, layout_options, run.total, resolve_threads(sink_options.threads),
                                image_bytes(encoding, spec.image_channels, spec.image_size), request.chunk_images,
                                needs_image_order(request.formats, run.reader.random_access()));
  // --resume: the files of the job that an earlier run finished are kept; only the others are made.
  std::unique_ptr<ResumeFiles> resume;
  if (request.resume) {
    const JobDescription job =
        resume_job_description(request, summary.device, run.reader, layout_options, run.total, flow.unit_images);
    resume = prepare_resume(request.output_prefix, job, request.formats, layout_options, run.total, flow.unit_images,
                            sink_options.threads, request.on_notice);
    sink_options.resume = resume.get();
  }
  // Every output exists as a temporary file before any image is computed (with --resume, as its first
  // image comes).
  std::vector<std::unique_ptr<ImageSink>> sinks;
  std::vector<ImageSink*> outputs;
  for (OutputFormat format : request.formats) {
    sinks.push_back(make_sink(format, request.output_prefix, run.total, sink_options));
    outputs.push_back(sinks.back().get());
  }
  PiecePlan plan = resume ? PiecePlan(run.total, flow.unit_images, flow.piece_images, flow.lanes, resume->units_to_make())
                          : PiecePlan(run.total, flow.unit_images, flow.piece_images, flow.lanes);
  EngineOptions options;
  options.piece_images = flow.piece_images;
  options.buffers = flow.buffers;
  options.threads = sink_options.threads;
  options.encoding = encoding;
  options.image_channels = spec.image_channels;
  options.image_size = spec.image_size;
  options.allocate = [&backend](size_t bytes) { return backend->allocate_host(bytes); };
  options.encoded_runs = backend->makes_encoded_runs();
  OutputEngine engine(outputs, options);
  const int64_t planned = plan.images();
  ProgressDisplay progress(stderr, request.progress, planned, [&generated] { return generated.load(); });
  PieceLoop loop{*backend, engine, plan, run.reader, flow.buffers, run.net, request.model_path, request.backend.threads,
                 nullptr, nullptr};
  loop.first_piece = [&] {
    if (!device_notice.empty() && request.on_notice) request.on_notice(device_notice);
  };
  // Exact after each piece, whether or not the backend counted the piece's passes as it went (the CPU
  // backend adds each pass to `generated`; a sum of pieces set over it, never added to it).
  int64_t pieces_done = 0;
  loop.generated = [&generated, &pieces_done](int64_t count) { generated.store(pieces_done += count); };
  PieceLoopSeconds seconds = run_piece_loop(loop);
  const auto start = Clock::now();
  run.reader.finish();
  seconds.parse += seconds_since(start) + run.parse_seconds;

  engine.finish();
  commit_sinks(outputs);  // every byte of every output on disk, then all renamed or none
  progress.finish();
  summarize_run(request, run, sinks, engine, seconds, summary);
  if (resume) {
    summary.images = planned;
    summary.resumed = ResumedFiles{resume_manifest_path(request.output_prefix), run.total, resume->kept_files(),
                                   resume->made_files()};
  }
}

}  // namespace

SampleFacts sample_facts(const GenerateRequest& request, const InputFile* model_file) {
  SampleFacts facts;
  if (model_file != nullptr) {
    facts.model = base_name(model_file->path());
    if (model_file->regular()) facts.model_xxh3 = model_file->digest().hex();  // a pipe's bytes are gone
  }
  facts.precision = precision_name(request.backend.precision);
  facts.random = request.latents.path.empty();  // --random, --interpolate: drawn from the seed
  facts.random_seed = request.latents.seed;
  facts.truncation = request.latents.truncation;
  if (const ImageSeeds seed_of = request.latents.image_seeds(); seed_of && seed_of(0).has_value()) {
    facts.image_seed = [seed_of](int64_t index) { return seed_of(index).value_or(0); };  // --seeds: each its own
    facts.named_by_seed = true;
  }
  return facts;
}

void refuse_repeated_seed_names(const GenerateRequest& request) {
  if (!request.latents.seeds) return;
  const auto named = std::find_if(request.formats.begin(), request.formats.end(),
                                  [](OutputFormat f) { return f == OutputFormat::Png || f == OutputFormat::Tar; });
  if (named == request.formats.end()) return;
  const std::optional<SeedList::Repeat> repeat = request.latents.seeds->repeated_seed();
  if (!repeat) return;
  const std::string seed = std::to_string(repeat->seed);
  throw UserError("--seeds lists seed " + seed + " more than once (images " + std::to_string(repeat->first) + " and " +
                  std::to_string(repeat->second) + "), but --formats " + format_name(*named) +
                  " names each image by its seed (" + seed_image_key(repeat->seed) +
                  "): list each seed once, or write formats that do not name images (txt, bmp, npy, npy-u8, mosaic-png)");
}

RunSummary run_generation(const GenerateRequest& request) {
  RunSummary summary;
  const auto run_start = Clock::now();
  std::atomic<int64_t> generated{0};  // images generated so far, for the progress display

  // The CUDA context is made while the model and the latents are read and the outputs checked.
  const DeviceKind device = request.backend.device;
  std::unique_ptr<EarlyCudaContext> context;
  if (device == DeviceKind::Cuda || device == DeviceKind::Auto) context = std::make_unique<EarlyCudaContext>(request.backend.cuda_device);
  auto start = Clock::now();
  // The backends keep their own copy (host or device); this one names the layer of a non-finite image.
  std::unique_ptr<InputFile> model_file;
  if (device != DeviceKind::Synthetic) model_file = std::make_unique<InputFile>(request.model_path, InputKind::Model);
  // The model's digest is read before its weights, so that the load's last check covers both reads,
  // and the file is read no more once loaded (a change after that no longer touches the run).
  SampleFacts facts = sample_facts(request, model_file.get());
  const Network net = model_file ? load_network(*model_file) : Network();
  model_file.reset();
  summary.load_seconds = seconds_since(start);
  summary.startup.push_back({"model", summary.load_seconds, 0, ""});

  start = Clock::now();
  LatentSpec latent_spec = request.latents;
  latent_spec.latent_dim = net.spec().latent_dim;
  std::unique_ptr<LatentSource> reader = open_latents(latent_spec);
  const int64_t total = reader->count();
  const double parse_seconds = seconds_since(start);

  // Before the backend starts and before any output exists: one run at a time into the prefix, and
  // nothing replaced that facegen did not write (output_guard.hpp).
  SinkOptions sink_options = request.sinks;
  if (!sink_options.on_notice) sink_options.on_notice = request.on_notice;
  sink_options.image_channels = net.spec().image_channels;
  sink_options.image_size = net.spec().image_size;
  sink_options.facts = std::move(facts);
  summary.model_xxh3 = sink_options.facts.model_xxh3;
  const OutputGuard guard(request.output_prefix, request.formats, total, output_options(sink_options),
                          request.summary_json_path);
  summary.stale = guard.stale();
  const Prepared prepared{net, *reader, total, sink_options, parse_seconds, run_start, context.get()};
  naming_folder_change([&] { generate_into_outputs(request, prepared, generated, summary); });
  return summary;
}

}  // namespace facegen
