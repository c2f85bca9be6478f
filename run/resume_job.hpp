// resume_job.hpp: the job that a --resume run records and checks, and the start of such a run: the
// same for one process and for rank 0 of an MPI job.
//
// The job is what decides the outputs' bytes (commit/resume_manifest.hpp writes it as "job" lines),
// each field "-" where it decides nothing in this job:
//   program           facegen VERSION (commit C): another build may make other bytes
//   --device          cuda, cpu or synthetic (auto as it resolved)
//   --precision       fp32, tf32 or bf16 (the GPU's arithmetic; tar's json names it on every device)
//   FACEGEN_GPU_FP32, FACEGEN_GPU_GEMM, FACEGEN_GPU_KERNELS
//                     on cuda, these settings of the GPU's kernels ("unset" where not set)
//   model-xxh3        the model file's XXH3-128 (not on synthetic, which reads no model)
//   --model           its file's name: tar's json holds it
//   --random, --interpolate, --seeds, --seed, input-xxh3
//                     where the latents come from: N, K, the list, the seed of --random and
//                     --interpolate, the latent file's XXH3-128 (its path may differ: a staged copy)
//   images            N
//   --formats         the outputs, in a fixed order
//   --shard-images    the shards' images (tar's default included)
//   --png-level       where PNGs are written (png, tar)
//   image-channels    of the model's images
//   unit-images       the images of a unit (engine/resume_files.hpp), which the records count in
// --batch, --chunk, --threads and the rank count decide no byte, and are not recorded.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "commit/resume_manifest.hpp"
#include "engine/resume_files.hpp"
#include "latents/latent_source.hpp"
#include "run/pipeline.hpp"

namespace facegen {

// The PNG folder's unit where no format is sharded: a manifest line per 1,000 PNGs, and at most that
// many images a lane lost to a kill.
constexpr int64_t kResumePngGroupImages = 1000;
static_assert(kResumePngGroupImages % kPngSubfolderImages == 0, "a group of PNGs is whole subfolders");

// Throws UserError in one sentence where --resume cannot be given with these outputs: one that is not
// made of many files (formats/output_format.hpp, is_made_of_many_files), named.
void require_resumable_outputs(const std::vector<OutputFormat>& formats, int64_t shard_images);

// The job of `request` (see above). device: "cuda", "cpu" or "synthetic"; latents: the opened source
// (a latent file is hashed through it). Throws UserError where the latents cannot be read again in any
// order (a pipe), or the model cannot be read.
JobDescription resume_job_description(const GenerateRequest& request, const std::string& device, LatentSource& latents,
                                      const OutputOptions& options, int64_t total_images, int64_t unit_images);

// With the prefix's lock held (commit/output_guard.hpp) and before any output is made: reads
// PREFIX.facegen-resume; refuses in one sentence (UserError), changing nothing, where it records
// another job, naming what differs; removes the temporaries that dead runs of the prefix left
// (commit/dead_temporaries.hpp), telling `on_notice`; checks each recorded unit's files on `threads`
// threads, or starts the manifest afresh where there is none. The result records this process's
// units into the manifest itself (part 0).
std::unique_ptr<ResumeFiles> prepare_resume(const std::string& prefix, const JobDescription& job,
                                            const std::vector<OutputFormat>& formats, const OutputOptions& options,
                                            int64_t total_images, int64_t unit_images, int threads,
                                            const std::function<void(const std::string&)>& on_notice);

// The layouts of the job's outputs, as ResumeFiles takes them.
std::vector<OutputLayout> resume_layouts(const std::string& prefix, const std::vector<OutputFormat>& formats,
                                         const OutputOptions& options, int64_t total_images);

}  // namespace facegen
