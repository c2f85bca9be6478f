// metrics.cpp: see metrics.hpp.
#include "serve/metrics.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "common/build_info.hpp"
#include "common/version.hpp"
#include "serve/json.hpp"

namespace facegen::serve {
namespace {

std::string number(double v) {
  char text[64];
  std::snprintf(text, sizeof text, "%.9g", v);
  return text;
}

std::vector<double> seconds_buckets() {
  return {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30};
}

std::vector<double> batch_buckets(int64_t max_batch) {
  std::vector<double> bounds;
  for (int64_t b = 1; b < max_batch; b *= 2) bounds.push_back(static_cast<double>(b));
  bounds.push_back(static_cast<double>(max_batch));
  return bounds;
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds) : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {}

void Histogram::observe(double value) {
  const size_t k = static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin());
  ++counts[k];
  sum += value;
  ++count;
}

void Histogram::render(const std::string& name, const std::string& help, std::string& out, const std::string& labels) const {
  if (!help.empty()) out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  const std::string before = labels.empty() ? "" : labels + ",";
  const std::string own = labels.empty() ? "" : "{" + labels + "}";
  uint64_t running = 0;
  for (size_t k = 0; k <= bounds.size(); ++k) {
    running += counts[k];
    const std::string le = k < bounds.size() ? number(bounds[k]) : "+Inf";
    out += name + "_bucket{" + before + "le=\"" + le + "\"} " + std::to_string(running) + "\n";
  }
  out += name + "_sum" + own + " " + number(sum) + "\n" + name + "_count" + own + " " + std::to_string(count) + "\n";
}

void DurationStat::add(double seconds) {
  ++count;
  ns += static_cast<uint64_t>(std::max(0.0, seconds) * 1e9);
}

Metrics::Metrics(int64_t max_batch, std::vector<ModelFacts> models) : models_(std::move(models)), latency_(seconds_buckets()) {
  for (size_t k = 0; k < models_.size(); ++k) {
    per_model_.push_back({0, 0, {}, {}, {}, {}, {}, 0, Histogram(batch_buckets(max_batch)), Histogram(seconds_buckets()),
                          Histogram(seconds_buckets())});
  }
}

void Metrics::request(const std::string& route, int status, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{route, status}];
  latency_.observe(seconds);
}

void Metrics::inference(size_t model, int64_t count, bool ok, double seconds) {
  const int64_t now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::lock_guard<std::mutex> lock(mutex_);
  PerModel& m = per_model_.at(model);
  (ok ? m.success : m.fail).add(seconds);
  if (ok) m.images += static_cast<uint64_t>(count);
  m.last_inference_ms = now_ms;
}

void Metrics::batch(size_t model, const BatchReport& report) {
  std::lock_guard<std::mutex> lock(mutex_);
  PerModel& m = per_model_.at(model);
  ++m.batches;
  m.queue.add(report.queue_seconds);
  m.compute.add(report.compute_seconds);
  m.compute_by_batch_size[report.images].add(report.compute_seconds);
  m.batch_images.observe(static_cast<double>(report.images));
  m.queue_seconds.observe(report.queue_seconds);
  m.compute_seconds.observe(report.compute_seconds);
}

void Metrics::render_connections(std::string& out) const {
  out += "# HELP facegen_connections_open Connections held now.\n# TYPE facegen_connections_open gauge\n"
         "facegen_connections_open " + std::to_string(connections_open_.load()) + "\n";
  out += "# HELP facegen_connections_accepted_total Connections accepted and held.\n"
         "# TYPE facegen_connections_accepted_total counter\n"
         "facegen_connections_accepted_total " + std::to_string(connections_accepted_.load()) + "\n";
  out += "# HELP facegen_connections_refused_total Connections answered 503 at once, past --max-connections.\n"
         "# TYPE facegen_connections_refused_total counter\n"
         "facegen_connections_refused_total " + std::to_string(connections_refused_.load()) + "\n";
  out += "# HELP facegen_connections_timed_out_total Connections closed by a timeout, by where they were.\n"
         "# TYPE facegen_connections_timed_out_total counter\n";
  const char* phases[] = {"idle", "head", "body", "write"};
  for (size_t k = 0; k < timed_out_.size(); ++k) {
    out += std::string("facegen_connections_timed_out_total{phase=\"") + phases[k] + "\"} " + std::to_string(timed_out_[k].load()) + "\n";
  }
}

// A label's value as the exposition format writes it: backslash, quote and newline escaped.
static std::string label_value(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\' || c == '"') out += '\\';
    out += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return out;
}

void Metrics::render_models(const std::vector<ModelGauges>& gauges, std::string& out) const {
  out += "# HELP facegen_model_info The models served: the file, its XXH3-128, the arithmetic and the device.\n"
         "# TYPE facegen_model_info gauge\n";
  for (const ModelFacts& m : models_) {
    out += "facegen_model_info{model=\"" + label_value(m.name) + "\",file=\"" + label_value(m.file) + "\",xxh3=\"" +
           m.xxh3 + "\",precision=\"" + m.precision + "\",device=\"" + m.device + "\"} 1\n";
  }
  auto family = [&](const char* name, const char* type, const char* help, auto value) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    for (size_t k = 0; k < models_.size(); ++k) {
      out += std::string(name) + "{model=\"" + label_value(models_[k].name) + "\"} " + std::to_string(value(k)) + "\n";
    }
  };
  family("facegen_images_total", "counter", "Images generated for answers.", [&](size_t k) { return per_model_[k].images; });
  family("facegen_queue_images", "gauge", "Images waiting for a worker.",
         [&](size_t k) { return k < gauges.size() ? gauges[k].queued_images : 0; });
  family("facegen_workers", "gauge", "Backends generating (one per GPU, or the CPU).",
         [&](size_t k) { return k < gauges.size() ? gauges[k].workers : 0; });
  const struct {
    const char* name;
    const char* help;
    Histogram PerModel::*histogram;
  } histograms[] = {
      {"facegen_batch_images", "Images per backend batch.", &PerModel::batch_images},
      {"facegen_queue_seconds", "Per batch, how long its oldest image waited in the queue.", &PerModel::queue_seconds},
      {"facegen_compute_seconds", "Per batch, from its taking to its images in the requests' memory.", &PerModel::compute_seconds},
  };
  for (const auto& h : histograms) {
    for (size_t k = 0; k < models_.size(); ++k) {
      (per_model_[k].*h.histogram).render(h.name, k == 0 ? h.help : "", out, "model=\"" + label_value(models_[k].name) + "\"");
    }
  }
}

std::string Metrics::render(const std::vector<ModelGauges>& gauges) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string cuda = cuda_architectures();
  std::string out = "# HELP facegen_build_info This build of facegen: its version, commit, CUDA architectures and MPI.\n"
                    "# TYPE facegen_build_info gauge\n"
                    "facegen_build_info{version=\"" FACEGEN_VERSION "\",commit=\"" + std::string(git_commit()) +
                    "\",cuda=\"" + (cuda.empty() ? "no" : cuda) + "\",mpi=\"" + (built_with_mpi() ? "yes" : "no") + "\"} 1\n";
  out += "# HELP facegen_requests_total Requests answered, by route and HTTP status.\n"
         "# TYPE facegen_requests_total counter\n";
  for (const auto& [key, count] : requests_) {
    out += "facegen_requests_total{route=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"} " +
           std::to_string(count) + "\n";
  }
  latency_.render("facegen_request_seconds", "Time from a request read to its answer made.", out);
  render_models(gauges, out);
  render_connections(out);
  return out;
}

std::string Metrics::model_stats_json(size_t model) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const PerModel& m = per_model_.at(model);
  auto duration = [](const DurationStat& d) {
    return "{\"count\": " + std::to_string(d.count) + ", \"ns\": " + std::to_string(d.ns) + "}";
  };
  const std::string none = duration(DurationStat());
  std::string out = "{\"name\": " + json::quote(models_.at(model).name) + ", \"version\": \"1\", \"last_inference\": " +
                    std::to_string(m.last_inference_ms) + ", \"inference_count\": " + std::to_string(m.images) +
                    ", \"execution_count\": " + std::to_string(m.batches) + ", \"inference_stats\": {\"success\": " +
                    duration(m.success) + ", \"fail\": " + duration(m.fail) + ", \"queue\": " + duration(m.queue) +
                    ", \"compute_input\": " + none + ", \"compute_infer\": " + duration(m.compute) +
                    ", \"compute_output\": " + none + ", \"cache_hit\": " + none + ", \"cache_miss\": " + none +
                    "}, \"batch_stats\": [";
  bool first = true;
  for (const auto& [size, compute] : m.compute_by_batch_size) {
    out += std::string(first ? "" : ", ") + "{\"batch_size\": " + std::to_string(size) + ", \"compute_input\": " + none +
           ", \"compute_infer\": " + duration(compute) + ", \"compute_output\": " + none + "}";
    first = false;
  }
  return out + "]}";
}

}  // namespace facegen::serve
