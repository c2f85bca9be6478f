// pipeline.hpp: one generation job in one process: model + latents in, image files out.
//
// Order of work: load and validate the model; open the latent file and read N; create every output
// (as temporary files, so a missing or read-only directory fails before any computing); then, in
// chunks, read latents -> generate -> append to every output; check that no token follows the N*100
// numbers; commit the outputs (rename into place). Any error leaves no output file behind.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "generator/backend.hpp"
#include "generator/image_sink.hpp"
#include "generator/latent_source.hpp"

namespace facegen {

// The output formats, by file extension.
enum class OutputFormat { Text, Bmp, Npy };
std::vector<OutputFormat> parse_formats(const std::string& list);  // "txt,bmp" -> ...; UserError
const char* format_extension(OutputFormat format);                 // "txt", "bmp", "npy"

// Makes the sink of one format at PREFIX.<ext> for N images.
std::unique_ptr<ImageSink> make_sink(OutputFormat format, const std::string& prefix, int64_t total_images);

struct GenerateRequest {
  std::string model_path;
  LatentSpec latents;
  std::string output_prefix;
  std::vector<OutputFormat> formats{OutputFormat::Text, OutputFormat::Bmp};
  BackendOptions backend;
  int64_t chunk_images = 1024;  // latents read, generated and written per step
  std::function<void(const std::string&)> on_notice;  // told at once, e.g. why the CPU was chosen
};

struct GenerateReport {
  int64_t images = 0;
  std::string backend;
  std::string latents;  // where they came from
  double load_seconds = 0;     // reading and validating the model, starting the backend
  double parse_seconds = 0;    // reading latents
  double compute_seconds = 0;  // generation alone
  double write_seconds = 0;    // formatting and writing outputs
  std::vector<std::string> outputs;
};

GenerateReport run_generation(const GenerateRequest& request);

}  // namespace facegen
