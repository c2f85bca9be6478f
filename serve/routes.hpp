// routes.hpp: the service's HTTP API (docs/service.md), on requests read by the HTTP layer
// (http_server.hpp):
//   GET  /                      the page (page.hpp)
//   GET  /healthz               200 while the process serves
//   GET  /readyz                200 once the model is loaded and a worker is ready; 503 while stopping
//   POST /v1/generate           {"seeds": [..]} or {"latents": [[nz numbers], ..]}, "format", "columns", "padding"
//   GET  /v1/images/SEED.png    one image by its seed (cacheable: always the same bytes)
//   GET  /v1/latents?seeds=L    {"latents": [[nz numbers], ..]}: the latents of the seeds, for the page's mixing
//   GET  /metrics               Prometheus text (metrics.hpp)
// and the Open Inference Protocol (oip.hpp) for the model "facegen", version 1:
//   GET  /v2                    the server's metadata
//   GET  /v2/health/live        200 while the process serves; /v2/health/ready 200 when ready, 400 while stopping
//   GET  /v2/models/facegen[/versions/1]          the model's metadata; .../ready as /v2/health/ready
//   POST /v2/models/facegen[/versions/1]/infer    latents or seeds in, images out
// GET routes answer HEAD too. Every error is {"error": "one sentence"} with its 4xx or 5xx status: 400
// a bad request, 404 no such route (or model), 405 a wrong method (with Allow), 413 a body too large,
// 422 latents that make a non-finite image, 429 the queue full, 500 a failure of the service, 503
// stopping; with a token, 401 where /v1/, /v2/ (but its health and readiness) or /metrics is asked
// without it (the page, /healthz, /readyz and the probes stay open, for browsers and probes).
#pragma once

#include <atomic>
#include <exception>
#include <cstdint>
#include <string>

#include "serve/answer.hpp"
#include "serve/batcher.hpp"
#include "serve/http_message.hpp"
#include "serve/metrics.hpp"

namespace facegen::serve {

constexpr int64_t kMaxBodyBytes = int64_t{32} << 20;  // 4,096 latents of 100 numbers in 32 bytes each, and room

class RequestThreads;

struct Service {
  Batcher& batcher;
  Metrics& metrics;
  ServiceFacts facts;
  std::string token;  // --token-file's: /v1/, /v2/ and /metrics then need "Authorization: Bearer TOKEN"
  std::atomic<bool> stopping{false};
  RequestThreads* request_threads = nullptr;  // where answers that take CPU are encoded (none: in place)
};

class Routes {
 public:
  explicit Routes(Service& service) : service_(service) {}

  // Whether answering `request` may take more than a moment of CPU (a large body to read, many numbers
  // to make): it then runs on a request thread, never on an event loop. Waiting for images is not:
  // such an answer comes later (HttpResponse::later) and holds no thread meanwhile.
  bool slow(const HttpRequest& request) const;
  // The answer to `request`, timed and counted in the metrics (a later one when it is made). Never throws.
  HttpResponse answer(const HttpRequest& request) const;
  // The answer to a request the HTTP layer refused (counted as route "other"); it closes the connection.
  HttpResponse refusal(const HttpRefusal& refusal) const;

 private:
  Service& service_;
};

// Whether an Authorization header's value is "Bearer TOKEN", compared in time that does not depend
// on where it differs.
bool bearer_matches(const std::string& header, const std::string& token);

// {"error": "SENTENCE"} with the sentence's quotes, backslashes and control characters escaped.
std::string error_json(const std::string& sentence);

// The answer to a handler's exception: RequestError its status, QueueFull 429, UserError 422, any
// other 500; each {"error": "..."}. `response` keeps its fields (Allow, WWW-Authenticate).
void answer_error(std::exception_ptr error, HttpResponse& response);

}  // namespace facegen::serve
