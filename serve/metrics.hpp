// metrics.hpp: the service's counters and histograms, rendered as Prometheus text (exposition format
// 0.0.4) for GET /metrics. Every name starts with facegen_:
//   facegen_requests_total{route,status}   requests answered
//   facegen_images_total                   images generated for answers
//   facegen_request_seconds                latency histogram, from the request read to the answer made
//   facegen_batch_images                   histogram of images per backend batch
//   facegen_queue_seconds, facegen_compute_seconds   per batch: its oldest image's wait, the backend's time
//   facegen_queue_images                   gauge: images waiting for a worker now
//   facegen_workers                        gauge: backends (one per GPU, or the CPU)
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "serve/batcher.hpp"

namespace facegen::serve {

// Cumulative buckets: counts[k] holds observations <= bounds[k]; the last bucket is +Inf.
struct Histogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;  // bounds.size() + 1
  double sum = 0;
  uint64_t count = 0;
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  void render(const std::string& name, const std::string& help, std::string& out) const;
};

class Metrics {
 public:
  explicit Metrics(int64_t max_batch);
  void request(const std::string& route, int status, double seconds);
  void images(int64_t count);
  void batch(const BatchReport& report);
  // The text of GET /metrics, with the gauges given.
  std::string render(int64_t queued_images, size_t workers) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t images_ = 0;
  Histogram latency_, batch_images_, queue_, compute_;
};

}  // namespace facegen::serve
