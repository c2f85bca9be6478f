// pipeline.hpp: one generation job in one process: model + latents in, image files out.
//
// Order of work: load and validate the model; open the latent file and read N; create every output
// (as temporary files, so a missing or read-only directory fails before any computing); then the
// output engine over the whole job (engine/: pieces read ahead, streamed through the backend,
// written by every output on the process's pool while the next are generated); check that no token
// follows the N*nz numbers and that the latent file did not change since it was opened (each input
// is opened once and read through that descriptor: latents/input_file.hpp); commit the outputs
// (rename into place). Any error leaves no output file behind. With --resume, each file goes into
// place as soon as it is finished (run/resume_job.hpp), and only the files a run of the job has not
// finished are made.
//
// Memory does not depend on N: the engine's ring of pieces and their latents (engine/piece_plan.hpp,
// job_flow), each sink's own fixed buffers (mosaics: one file's pixels), the backend's. docs/usage.md
// states the bound.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "generator/backend.hpp"
#include "engine/image_sink.hpp"
#include "formats/output_format.hpp"
#include "latents/latent_source.hpp"
#include "run/progress.hpp"
#include "run/summary.hpp"

namespace facegen {

struct GenerateRequest {
  std::string model_path;
  LatentSpec latents;  // latents.image_seeds(): image k's seed under --seeds, for outputs that name it
  std::string output_prefix;
  std::vector<OutputFormat> formats{OutputFormat::Text, OutputFormat::Bmp};
  BackendOptions backend;
  int64_t chunk_images = 0;  // --chunk: images per piece (engine/piece_plan.hpp); 0: job_flow() decides
  SinkOptions sinks;            // writer threads, mosaic limit (its on_notice is on_notice)
  std::function<void(const std::string&)> on_notice;  // told at once, e.g. why the CPU was chosen
  ProgressOptions progress;     // shown on stderr while images are generated (rank 0 in an MPI job)
  std::string summary_json_path;  // where the JSON summary goes; empty: none (rank 0 writes it)
  // --resume (run/resume_job.hpp): each file is put in place as it is finished and recorded in
  // PREFIX.facegen-resume; a run of the same job keeps the files recorded there and makes the rest.
  // Every output must be made of many files (sinks.png_group_images then set).
  bool resume = false;
};

// What each tar sample's json says of the run: its model (`model_file`'s name and XXH3-128; null for
// synthetic images), precision and (drawn latents) seed; and, with --seeds, that images are named by
// seed. Reads the model file for its digest (a regular file; a pipe's bytes are for the loader, and
// its digest stays unknown): call it before the load, whose last check then covers this read too.
SampleFacts sample_facts(const GenerateRequest& request, const InputFile* model_file);

// --seeds with png or tar, which name each image by its seed: a seed listed twice is refused
// (UserError naming the seed and its two images), since its two files would have one name.
void refuse_repeated_seed_names(const GenerateRequest& request);

// Runs the job and returns its summary (not yet printed nor written: that is the caller's).
RunSummary run_generation(const GenerateRequest& request);

}  // namespace facegen
