// metrics.hpp: the service's counters and histograms, rendered as Prometheus text (exposition format
// 0.0.4) for GET /metrics and, per model, as the statistics of Triton's statistics extension (GET
// /v2/models/NAME/stats). Every name starts with facegen_:
//   facegen_build_info{version,commit,cuda,mpi}   1: what this build is
//   facegen_model_info{model,file,xxh3,precision,device}   1 per model served: what decides its bytes
//   facegen_requests_total{route,status}   requests answered
//   facegen_images_total{model}            images generated for answers
//   facegen_request_seconds                latency histogram, from the request read to the answer made
//   facegen_batch_images{model}            histogram of images per backend batch
//   facegen_queue_seconds{model}, facegen_compute_seconds{model}   per batch: its oldest image's wait,
//                                          the backend's time
//   facegen_queue_images{model}            gauge: images waiting for a worker now
//   facegen_workers{model}                 gauge: backends (one per GPU, or the CPU)
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
  // The series of `name` (its HELP and TYPE lines where `help` is not empty), each with `labels`
  // (`model="faces"`, or "") before its le.
  void render(const std::string& name, const std::string& help, std::string& out, const std::string& labels = "") const;
};

// Triton's duration statistic: how many, and their nanoseconds together.
struct DurationStat {
  uint64_t count = 0;
  uint64_t ns = 0;
  void add(double seconds);
};

// What the service knows of one model, for /metrics and Triton's statistics.
struct ModelFacts {
  std::string name, file, xxh3, precision, device;
};

// The gauges of one model at the moment of a /metrics request.
struct ModelGauges {
  int64_t queued_images = 0;
  size_t workers = 0;
};

// Where a connection was when its time ran out.
enum class TimeoutPhase { Idle, Head, Body, Write };

class Metrics {
 public:
  // `models`: the models served, in order; every per-model call names one by its index.
  Metrics(int64_t max_batch, std::vector<ModelFacts> models);
  void request(const std::string& route, int status, double seconds);
  // An inference of `model` answered (ok: its `count` images made) or failed, after `seconds`.
  void inference(size_t model, int64_t count, bool ok, double seconds);
  void batch(size_t model, const BatchReport& report);
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
  // The text of GET /metrics, with each model's gauges (in the models' order).
  std::string render(const std::vector<ModelGauges>& gauges) const;
  // Triton's $model_stat of model `model`, version "1" (extension_statistics): its inference and
  // execution counts, the success, fail, queue and compute_infer durations, per batch size.
  std::string model_stats_json(size_t model) const;

 private:
  // One model's figures.
  struct PerModel {
    uint64_t images = 0;   // inference_count: images of successful inferences
    uint64_t batches = 0;  // execution_count
    DurationStat success, fail, queue, compute;
    std::map<int64_t, DurationStat> compute_by_batch_size;
    int64_t last_inference_ms = 0;  // since the epoch; 0: none yet
    Histogram batch_images, queue_seconds, compute_seconds;
  };
  void render_models(const std::vector<ModelGauges>& gauges, std::string& out) const;
  void render_connections(std::string& out) const;
  mutable std::mutex mutex_;
  std::vector<ModelFacts> models_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  Histogram latency_;
  std::vector<PerModel> per_model_;
  std::atomic<int64_t> connections_open_{0};
  std::atomic<uint64_t> connections_accepted_{0}, connections_refused_{0};
  std::array<std::atomic<uint64_t>, 4> timed_out_{};
};

}  // namespace facegen::serve
