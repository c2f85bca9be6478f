// routes.hpp: the service's HTTP API on a cpp-httplib server (docs/service.md):
//   GET  /                      the page (page.hpp)
//   GET  /healthz               200 while the process serves
//   GET  /readyz                200 once the model is loaded and a worker is ready; 503 while stopping
//   POST /v1/generate           {"seeds": [..]} or {"latents": [[nz numbers], ..]}, "format", "columns", "padding"
//   GET  /v1/images/SEED.png    one image by its seed (cacheable: always the same bytes)
//   GET  /v1/latents?seeds=L    {"latents": [[nz numbers], ..]}: the latents of the seeds, for the page's mixing
//   GET  /metrics               Prometheus text (metrics.hpp)
// Every error is {"error": "one sentence"} with its 4xx or 5xx status: 400 a bad request, 404 no such
// route, 405 a wrong method (with Allow), 413 a body too large, 429 the queue full, 500 a failure of
// the service, 503 stopping; with a token, 401 where /v1/ or /metrics is asked without it (the page,
// /healthz and /readyz stay open, for browsers and probes).
#pragma once

#include <atomic>
#include <cstdint>

#include "serve/answer.hpp"
#include "serve/batcher.hpp"
#include "serve/metrics.hpp"

namespace httplib {
class Server;
}

namespace facegen::serve {

constexpr int64_t kMaxBodyBytes = int64_t{32} << 20;  // 4,096 latents of 100 numbers in 32 bytes each, and room

struct Service {
  Batcher& batcher;
  Metrics& metrics;
  ServiceFacts facts;
  std::string token;  // --token-file's: /v1/ and /metrics then need "Authorization: Bearer TOKEN"
  std::atomic<bool> stopping{false};
};

// Whether an Authorization header's value is "Bearer TOKEN", compared in time that does not depend
// on where it differs.
bool bearer_matches(const std::string& header, const std::string& token);

// {"error": "SENTENCE"} with the sentence's quotes, backslashes and control characters escaped.
std::string error_json(const std::string& sentence);

void add_routes(httplib::Server& server, Service& service);

}  // namespace facegen::serve
