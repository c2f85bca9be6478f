// metrics.cpp: see metrics.hpp.
#include "serve/metrics.hpp"

#include <algorithm>
#include <cstdio>

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

void Histogram::render(const std::string& name, const std::string& help, std::string& out) const {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t running = 0;
  for (size_t k = 0; k <= bounds.size(); ++k) {
    running += counts[k];
    const std::string le = k < bounds.size() ? number(bounds[k]) : "+Inf";
    out += name + "_bucket{le=\"" + le + "\"} " + std::to_string(running) + "\n";
  }
  out += name + "_sum " + number(sum) + "\n" + name + "_count " + std::to_string(count) + "\n";
}

Metrics::Metrics(int64_t max_batch)
    : latency_(seconds_buckets()), batch_images_(batch_buckets(max_batch)), queue_(seconds_buckets()), compute_(seconds_buckets()) {}

void Metrics::request(const std::string& route, int status, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{route, status}];
  latency_.observe(seconds);
}

void Metrics::images(int64_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  images_ += static_cast<uint64_t>(count);
}

void Metrics::batch(const BatchReport& report) {
  std::lock_guard<std::mutex> lock(mutex_);
  batch_images_.observe(static_cast<double>(report.images));
  queue_.observe(report.queue_seconds);
  compute_.observe(report.compute_seconds);
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

std::string Metrics::render(int64_t queued_images, size_t workers) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out = "# HELP facegen_requests_total Requests answered, by route and HTTP status.\n"
                    "# TYPE facegen_requests_total counter\n";
  for (const auto& [key, count] : requests_) {
    out += "facegen_requests_total{route=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"} " +
           std::to_string(count) + "\n";
  }
  out += "# HELP facegen_images_total Images generated for answers.\n# TYPE facegen_images_total counter\n"
         "facegen_images_total " + std::to_string(images_) + "\n";
  latency_.render("facegen_request_seconds", "Time from a request read to its answer made.", out);
  batch_images_.render("facegen_batch_images", "Images per backend batch.", out);
  queue_.render("facegen_queue_seconds", "Per batch, how long its oldest image waited in the queue.", out);
  compute_.render("facegen_compute_seconds", "Per batch, from its taking to its images in the requests' memory.", out);
  out += "# HELP facegen_queue_images Images waiting for a worker.\n# TYPE facegen_queue_images gauge\n"
         "facegen_queue_images " + std::to_string(queued_images) + "\n";
  out += "# HELP facegen_workers Backends generating (one per GPU, or the CPU).\n# TYPE facegen_workers gauge\n"
         "facegen_workers " + std::to_string(workers) + "\n";
  render_connections(out);
  return out;
}

}  // namespace facegen::serve
