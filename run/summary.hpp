// summary.hpp: what a finished run reports, in one structure that both drivers fill (run/pipeline
// for a single process, mpi/rank_job for an MPI job's rank 0), printed for a person and written as
// JSON (--summary-json FILE) for a pipeline or a job script.
//
// The human summary is a few aligned lines (model, input, ranks, backend, one line per stage with
// its seconds and rates, total, peak memory, every file written). The JSON holds the same figures
// and, for an MPI job, each rank's; for --seeds, every seed as [first, last] ranges, so that any image
// can be made again; it is written atomically (commit/atomic_file.hpp) like every
// output. README ("Machine-readable summary") lists its keys.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "latents/seed_list.hpp"

namespace facegen {

struct StageTiming {
  std::string name;      // "parse", "generate", "format", "write"
  double seconds = 0;
  double bytes = 0;      // bytes read or written in this stage, 0 where that means nothing
  std::string note;      // how to read the figure, e.g. "slowest rank, not counting files"
};

struct FileWritten {
  std::string path;
  int64_t bytes = 0;
};

// One rank's figures in an MPI job.
struct RankFigures {
  int rank = 0;
  std::string host;
  std::string backend;      // "sits out" for a rank left out of a small job
  int64_t images = 0;
  double startup_seconds = 0, parse_seconds = 0, compute_seconds = 0, format_seconds = 0, write_seconds = 0,
         total_seconds = 0;
  int64_t peak_memory_bytes = 0;
};

struct RunSummary {
  std::string model;          // path, normalised; empty for --device synthetic
  std::string latents;        // where they came from
  std::shared_ptr<const SeedList> seeds;  // --seeds: image k is the image of seed seeds->seed_at(k); else null
  int64_t images = 0;
  std::string device;         // "cuda", "cpu", "synthetic"
  std::string precision;      // "fp32", "tf32", "bf16"
  std::string backend;        // the backend's own description (rank 0's in an MPI job)
  int ranks = 1, hosts = 1, generating_ranks = 1;
  std::string ranks_note;     // MPI: how the work was shared
  double load_seconds = 0;    // model load and backend start (slowest rank)
  // A single process's start-up in parts (empty for MPI): "model" (read and checked), "cuda_context_wait"
  // (the wait for the CUDA context beyond what ran beside its creation), "backend" (weights, buffers).
  std::vector<StageTiming> startup;
  std::vector<StageTiming> stages;
  double total_seconds = 0;
  int64_t peak_memory_bytes = 0;  // this process's (rank 0's); each rank's in `per_rank`
  double cpu_seconds = 0;         // this process's CPU time, every thread (rank 0's)
  int64_t threads_started = 0;    // threads this process's pools started (rank 0's)
  std::vector<FileWritten> files;
  std::vector<std::string> stale;     // an earlier run's outputs with this prefix, left beside the new ones
  std::vector<RankFigures> per_rank;  // MPI only
};

// "1.234 s (810 images/s, 95.3 MB/s)"; rates are left out where they mean nothing.
std::string timing_text(double seconds, int64_t images, double bytes);

void print_summary(std::FILE* out, const RunSummary& summary);
std::string summary_json(const RunSummary& summary);  // pretty-printed, ends with a newline
// Writes summary_json() to `path` atomically; UserError naming the path on failure.
void write_summary_json(const std::string& path, const RunSummary& summary);

// What a finished run reports, for both drivers: the JSON to `json_path` ("" none; "-" or
// /dev/stdout: standard output, which then carries the JSON alone), and the summary for a person on
// stdout unless `quiet` or the JSON went there.
void report_summary(const RunSummary& summary, const std::string& json_path, bool quiet);

// "a//b/./c/../d" -> "a/b/d": how the summary shows every path.
std::string normal_path(const std::string& path);

// The size of a file, or of a directory's files (a png folder); 0 if it cannot be read.
int64_t file_bytes(const std::string& path);

}  // namespace facegen
