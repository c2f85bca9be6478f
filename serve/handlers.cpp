// handlers.cpp: see handlers.hpp. The generating handlers make their images through the batcher
// (images_of), on a request thread (routes.cpp marks them slow).
#include "serve/handlers.hpp"

#include <cmath>
#include <cstdio>
#include <vector>

#include "common/build_info.hpp"
#include "latents/latent_source.hpp"
#include "serve/json.hpp"
#include "serve/oip.hpp"
#include "serve/page.hpp"
#include "serve/request.hpp"

namespace facegen::serve {
namespace {

// The images (count, S, S, nc) of checked latents, made by the batcher.
std::vector<float> images_of(Service& service, const GenerateSpec& spec) {
  if (service.stopping) throw RequestError(503, "the service is stopping and takes no new work");
  const ModelSpec& model = service.facts.spec;
  std::vector<float> images(static_cast<size_t>(spec.count * model.image_values()));  // (count, S, S, nc)
  service.batcher.generate(spec.latents.data(), spec.count, images.data());
  for (float v : images) {
    if (!std::isfinite(v)) throw RequestError(422, "the model made a non-finite image from these latents; give latents of ordinary size (a Gaussian's values lie within +-8)");
  }
  service.metrics.images(spec.count);
  return images;
}

}  // namespace

void page(Service&, const HttpRequest&, HttpResponse& res) { res.set(200, "text/html; charset=utf-8", page_html()); }

void healthz(Service&, const HttpRequest&, HttpResponse& res) { res.set(200, "application/json", "{\"status\": \"ok\"}\n"); }

void readyz(Service& service, const HttpRequest&, HttpResponse& res) {
  if (service.stopping) throw RequestError(503, "the service is stopping");
  res.set(200, "application/json", "{\"status\": \"ready\", \"workers\": " + std::to_string(service.batcher.workers()) + "}\n");
}

void metrics_text(Service& service, const HttpRequest&, HttpResponse& res) {
  res.set(200, "text/plain; version=0.0.4", service.metrics.render(service.batcher.queued_images(), service.batcher.workers()));
}

void generate(Service& service, const HttpRequest& req, HttpResponse& res) {
  const GenerateSpec spec = parse_generate(req.body, service.facts.spec.latent_dim);
  const std::vector<float> images = images_of(service, spec);
  res.set(200, spec.format.content_type, encode_answer(spec, images.data(), service.facts));
}

void image_by_seed(Service& service, const HttpRequest& req, HttpResponse& res) {
  const std::string name = req.path.substr(std::string("/v1/images/").size());
  if (name.size() < 5 || name.compare(name.size() - 4, 4, ".png") != 0) {
    throw RequestError(404, "no image '" + json::printable(name) + "': images are named /v1/images/SEED.png");
  }
  GenerateSpec spec;
  spec.count = 1;
  spec.seeds.push_back(parse_seed(name.substr(0, name.size() - 4), "the SEED of /v1/images/SEED.png"));
  spec.latents.resize(static_cast<size_t>(service.facts.spec.latent_dim));
  seed_latent(spec.seeds[0], service.facts.spec.latent_dim, spec.latents.data());
  const std::vector<float> images = images_of(service, spec);
  res.fields.push_back({"Cache-Control", "public, max-age=31536000, immutable"});
  res.set(200, "image/png", encode_answer(spec, images.data(), service.facts));
}

// {"latents": [[...], ...]}, each value with enough digits to read back as the same float.
void latents_of_seeds(Service& service, const HttpRequest& req, HttpResponse& res) {
  const std::optional<std::string> list = req.param("seeds");
  if (!list) throw RequestError(400, "give the seeds as /v1/latents?seeds=3,5,100-103");
  const std::vector<uint64_t> seeds = parse_seed_query(*list);
  const int nz = service.facts.spec.latent_dim;
  std::vector<float> latent(static_cast<size_t>(nz));  // (nz)
  std::string out = "{\"latents\": [";
  char number[32];
  for (size_t k = 0; k < seeds.size(); ++k) {
    seed_latent(seeds[k], nz, latent.data());
    out += k ? ", [" : "[";
    for (int v = 0; v < nz; ++v) {
      std::snprintf(number, sizeof number, v ? ", %.9g" : "%.9g", static_cast<double>(latent[static_cast<size_t>(v)]));
      out += number;
    }
    out += "]";
  }
  res.set(200, "application/json", out + "]}\n");
}

void v2_server_metadata(Service&, const HttpRequest&, HttpResponse& res) { res.set(200, "application/json", oip_server_metadata(git_commit())); }

// The protocol's health answers are their status; their body is empty.
void v2_live(Service&, const HttpRequest&, HttpResponse& res) { res.set(200, "", ""); }

void v2_ready(Service& service, const HttpRequest&, HttpResponse& res) {
  if (service.stopping) throw RequestError(400, "the service is stopping");  // the protocol's "not ready" is a 4xx
  res.set(200, "", "");
}

void v2_model_metadata(Service& service, const HttpRequest&, HttpResponse& res) {
  res.set(200, "application/json", oip_model_metadata(service.facts.spec));
}

void v2_infer(Service& service, const HttpRequest& req, HttpResponse& res) {
  const InferRequest request = parse_infer(req.body, req.header(kOipBinaryLengthField), service.facts.spec.latent_dim);
  const std::vector<float> images = images_of(service, request.images);
  InferAnswer answer = encode_infer(request, images.data(), service.facts.spec);
  if (!answer.json_length.empty()) res.fields.push_back({kOipBinaryLengthField, answer.json_length});
  res.set(200, answer.content_type, std::move(answer.body));
}

}  // namespace facegen::serve
