// metrics.hpp: the service's counters and histograms, rendered as Prometheus text (exposition format
// 0.0.4) for GET /metrics. Every name starts with facegen_:
//   facegen_requests_total{route,status}   requests answered
//   facegen_images_total                   images generated for answers
//   facegen_request_seconds                latency histogram, from the request read to the answer made
//   facegen_batch_images                   histogram of images per backend batch
//   facegen_queue_seconds, facegen_compute_seconds   per batch: its oldest image's wait, the backend's time
//   facegen_queue_images                   gauge: images waiting for a worker now
//   facegen_workers                        gauge: backends (one per GPU, or the CPU)
//   facegen_connections_open               gauge: connections held now
//   facegen_connections_accepted_total     connections accepted and held
//   facegen_connections_refused_total      connections answered 503 at once, past --max-connections
//   facegen_connections_timed_out_total{phase}   connections closed by a timeout: idle (no request
//                                          begun), head, body (a request not whole in time), write
//                                          (an answer not taken)
#pragma once

#include <array>
#include <atomic>
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

// Where a connection was when its time ran out.
enum class TimeoutPhase { Idle, Head, Body, Write };

class Metrics {
 public:
  explicit Metrics(int64_t max_batch);
  void request(const std::string& route, int status, double seconds);
  void images(int64_t count);
  void batch(const BatchReport& report);
  // Connections: counted from the event loops, without a lock.
  // Counts a connection open unless `limit` are already: false (nothing counted) then.
  bool connection_opened_within(int64_t limit) {
    int64_t open = connections_open_.load();
    do {
      if (open >= limit) return false;
    } while (!connections_open_.compare_exchange_weak(open, open + 1));
    ++connections_accepted_;
    return true;
  }
  void connection_closed() { --connections_open_; }
  void connection_refused() { ++connections_refused_; }
  void connection_timed_out(TimeoutPhase phase) { ++timed_out_[static_cast<size_t>(phase)]; }
  int64_t connections_open() const { return connections_open_; }
  // The text of GET /metrics, with the gauges given.
  std::string render(int64_t queued_images, size_t workers) const;

 private:
  void render_connections(std::string& out) const;
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t images_ = 0;
  Histogram latency_, batch_images_, queue_, compute_;
  std::atomic<int64_t> connections_open_{0};
  std::atomic<uint64_t> connections_accepted_{0}, connections_refused_{0};
  std::array<std::atomic<uint64_t>, 4> timed_out_{};
};

}  // namespace facegen::serve
