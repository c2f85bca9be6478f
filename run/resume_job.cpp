// resume_job.cpp: the job of a --resume run and its start (see resume_job.hpp).
#include "run/resume_job.hpp"

#include <sys/stat.h>

#include <cstdlib>
#include <utility>

#include "commit/dead_temporaries.hpp"
#include "common/build_info.hpp"
#include "common/errors.hpp"
#include "common/path_parts.hpp"
#include "common/precision.hpp"
#include "common/text_format.hpp"
#include "common/version.hpp"
#include "latents/input_file.hpp"

namespace facegen {
namespace {

const char kNotUsed[] = "-";

std::string seeds_text(const SeedList& seeds) {
  std::string text;
  for (const SeedRange& range : seeds.ranges()) {
    text += (text.empty() ? "" : ",") + std::to_string(range.first) +
            (range.last == range.first ? "" : "-" + std::to_string(range.last));
  }
  return text;
}

std::string model_digest(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    throw UserError("--resume needs a model it can read again to check that a later run has the same one, but " + path +
                    " is not a regular file");
  }
  return "XXH3-128 " + InputFile(path, InputKind::Model).digest().hex();
}

std::string latent_digest(const LatentSpec& spec, LatentSource& latents) {
  if (spec.path.empty()) return kNotUsed;
  if (!latents.random_access() || latents.input_file() == nullptr) {
    throw UserError("--resume makes only the images still missing, which needs latents it can read in any order "
                    "(--random, --seeds, --interpolate or a regular file), but the latent file " + spec.path +
                    " is read in order only (a pipe or another stream)");
  }
  return "XXH3-128 " + latents.input_file()->digest().hex();
}

}  // namespace

void require_resumable_outputs(const std::vector<OutputFormat>& formats, int64_t shard_images) {
  for (OutputFormat format : formats) {
    if (is_made_of_many_files(format, shard_images)) continue;
    const bool npy = format == OutputFormat::Npy || format == OutputFormat::NpyU8;
    throw UserError(std::string("--resume keeps the finished files of outputs made of many files (tar, png, and npy or "
                                "npy-u8 with --shard-images), but ") + format_name(format) +
                    (npy ? " without --shard-images is one file" : " is made as one output") + ", all or nothing");
  }
}

JobDescription resume_job_description(const GenerateRequest& request, const std::string& device, LatentSource& latents,
                                      const OutputOptions& options, int64_t total_images, int64_t unit_images) {
  const LatentSpec& spec = request.latents;
  auto has = [&](OutputFormat format) {
    for (OutputFormat f : request.formats)
      if (f == format) return true;
    return false;
  };
  std::string formats;
  for (OutputFormat format : every_format()) {
    if (has(format)) formats += (formats.empty() ? "" : ",") + std::string(format_name(format));
  }
  const int64_t shard_images =
      options.shard_images > 0 ? options.shard_images : has(OutputFormat::Tar) ? kDefaultShardImages : 0;
  const bool cuda = device == "cuda";
  auto gpu_setting = [&](const char* name) -> std::string {
    if (!cuda) return kNotUsed;
    const char* value = std::getenv(name);
    return value == nullptr ? "unset" : value;
  };
  const bool drawn = spec.random_count > 0 || spec.interpolate_side > 0;
  JobDescription job = {
      {"program", std::string("facegen ") + FACEGEN_VERSION + " (commit " + git_commit() + ")"},
      {"--device", device},
      {"--precision", precision_name(request.backend.precision)},
      {"FACEGEN_GPU_FP32", gpu_setting("FACEGEN_GPU_FP32")},
      {"FACEGEN_GPU_GEMM", gpu_setting("FACEGEN_GPU_GEMM")},
      {"FACEGEN_GPU_KERNELS", gpu_setting("FACEGEN_GPU_KERNELS")},
      {"model-xxh3", device == "synthetic" ? kNotUsed : model_digest(request.model_path)},
      {"--model", has(OutputFormat::Tar) && !request.model_path.empty() ? base_name(request.model_path) : kNotUsed},
      {"--random", spec.random_count > 0 ? std::to_string(spec.random_count) : kNotUsed},
      {"--interpolate", spec.interpolate_side > 0 ? std::to_string(spec.interpolate_side) : kNotUsed},
      {"--seeds", spec.seeds ? seeds_text(*spec.seeds) : kNotUsed},
      {"--seed", drawn ? std::to_string(spec.seed) : kNotUsed},
      {"--truncation", spec.truncation > 0 ? shortest_decimal(spec.truncation) : kNotUsed},
      {"input-xxh3", latent_digest(spec, latents)},
      {"images", std::to_string(total_images)},
      {"--formats", formats},
      {"--shard-images", shard_images > 0 ? std::to_string(shard_images) : kNotUsed},
      {"--png-level", has(OutputFormat::Png) || has(OutputFormat::Tar) ? std::to_string(options.png_level) : kNotUsed},
      {"--png-layout", has(OutputFormat::Png) ? png_layout_name(options.png_layout) : kNotUsed},
      {"image-channels", std::to_string(options.image_channels)},
      {"image-size", std::to_string(options.image_size)},
      {"unit-images", std::to_string(unit_images)},
  };
  return job;
}

std::vector<OutputLayout> resume_layouts(const std::string& prefix, const std::vector<OutputFormat>& formats,
                                         const OutputOptions& options, int64_t total_images) {
  OutputOptions quiet = options;
  quiet.on_notice = nullptr;
  std::vector<OutputLayout> layouts;
  for (OutputFormat format : formats) layouts.emplace_back(format, prefix, total_images, quiet);
  return layouts;
}

std::unique_ptr<ResumeFiles> prepare_resume(const std::string& prefix, const JobDescription& job,
                                            const std::vector<OutputFormat>& formats, const OutputOptions& options,
                                            int64_t total_images, int64_t unit_images, int threads,
                                            const std::function<void(const std::string&)>& on_notice) {
  const std::string manifest = resume_manifest_path(prefix);
  const std::optional<ResumeManifest> recorded = read_resume_manifest(prefix);
  if (recorded) {
    const std::string differences = job_differences(recorded->job, job);
    if (!differences.empty()) {
      throw UserError("--resume: " + manifest + " records another job (" + differences +
                      "); nothing was changed: run that job again, or move " + manifest +
                      " away to start this one afresh");
    }
  }
  std::vector<OutputLayout> layouts = resume_layouts(prefix, formats, options, total_images);
  const std::vector<std::string> removed = remove_dead_temporaries(prefix, layouts, manifest);
  if (!removed.empty() && on_notice) {
    on_notice("removed " + with_commas(static_cast<int64_t>(removed.size())) +
              " temporary file(s) that a run of this prefix killed earlier left: " + removed.front() +
              (removed.size() > 1 ? " and " + with_commas(static_cast<int64_t>(removed.size()) - 1) + " more" : ""));
  }
  auto files = std::make_unique<ResumeFiles>(std::move(layouts), unit_images, std::make_unique<ManifestAppender>(prefix, 0));
  if (recorded) {
    files->verify(recorded->units, threads);
  } else {
    start_resume_manifest(prefix, job);
  }
  return files;
}

}  // namespace facegen
