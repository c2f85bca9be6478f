// pipeline.cpp: one generation job in one process (see pipeline.hpp for the order of work).
#include "generator/pipeline.hpp"

#include <algorithm>
#include <chrono>
#include <sstream>
#include <vector>

#include "generator/errors.hpp"
#include "generator/network.hpp"

namespace facegen {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

std::vector<OutputFormat> parse_formats(const std::string& list) {
  std::vector<OutputFormat> formats;
  std::stringstream stream(list);
  std::string name;
  while (std::getline(stream, name, ',')) {
    OutputFormat format;
    if (name == "txt" || name == "text") {
      format = OutputFormat::Text;
    } else if (name == "bmp") {
      format = OutputFormat::Bmp;
    } else if (name == "npy") {
      format = OutputFormat::Npy;
    } else {
      throw UserError("unknown output format '" + name + "' in --formats '" + list +
                      "' (expected a comma-separated list of txt, bmp, npy)");
    }
    if (std::find(formats.begin(), formats.end(), format) == formats.end()) formats.push_back(format);
  }
  if (formats.empty()) throw UserError("--formats is empty (expected a comma-separated list of txt, bmp, npy)");
  return formats;
}

const char* format_extension(OutputFormat format) {
  switch (format) {
    case OutputFormat::Text: return "txt";
    case OutputFormat::Bmp: return "bmp";
    case OutputFormat::Npy: return "npy";
  }
  return "?";
}

std::unique_ptr<ImageSink> make_sink(OutputFormat format, const std::string& prefix, int64_t total_images) {
  std::string path = prefix + "." + format_extension(format);
  switch (format) {
    case OutputFormat::Text: return make_text_sink(path, total_images);
    case OutputFormat::Bmp: return make_bmp_mosaic_sink(path, total_images);
    case OutputFormat::Npy: return make_npy_sink(path, total_images);
  }
  throw std::logic_error("unhandled output format");
}

GenerateReport run_generation(const GenerateRequest& request) {
  GenerateReport report;

  auto start = Clock::now();
  Network net = load_network(request.model_path);
  std::string notice;
  std::unique_ptr<Backend> backend = make_backend(net, request.backend, &notice);
  if (!notice.empty() && request.on_notice) request.on_notice(notice);
  report.backend = backend->describe();
  report.load_seconds = seconds_since(start);

  start = Clock::now();
  std::unique_ptr<LatentSource> reader = open_latents(request.latents);
  const int64_t total = reader->count();
  report.parse_seconds += seconds_since(start);

  // Every output exists as a temporary file before any image is computed.
  std::vector<std::unique_ptr<ImageSink>> sinks;
  for (OutputFormat format : request.formats) sinks.push_back(make_sink(format, request.output_prefix, total));

  const int64_t chunk = std::max<int64_t>(1, std::min(request.chunk_images, total));
  std::vector<float> latents(static_cast<size_t>(chunk) * kLatentDim);  // (chunk, 100)
  std::vector<float> images(static_cast<size_t>(chunk) * kImageValues);  // (chunk, 64, 64, 3)
  for (int64_t done = 0; done < total;) {
    start = Clock::now();
    const int64_t count = reader->read(latents.data(), chunk);
    report.parse_seconds += seconds_since(start);

    start = Clock::now();
    backend->generate(latents.data(), count, images.data());
    report.compute_seconds += seconds_since(start);

    start = Clock::now();
    for (auto& sink : sinks) sink->append(images.data(), done, count);
    report.write_seconds += seconds_since(start);
    done += count;
  }
  start = Clock::now();
  reader->finish();
  report.parse_seconds += seconds_since(start);

  start = Clock::now();
  for (auto& sink : sinks) {
    sink->commit();
    report.outputs.push_back(sink->path());
  }
  report.write_seconds += seconds_since(start);
  report.images = total;
  report.latents = reader->describe();
  return report;
}

}  // namespace facegen
