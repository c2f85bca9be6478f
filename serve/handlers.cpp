// handlers.cpp: see handlers.hpp. The generating handlers hand their latents to the batcher and
// answer later, once the images are made (answer_later.hpp).
#include "serve/handlers.hpp"

#include <cstdio>
#include <vector>

#include "common/build_info.hpp"
#include "latents/latent_source.hpp"
#include "serve/answer_later.hpp"
#include "serve/json.hpp"
#include "serve/oip.hpp"
#include "serve/page.hpp"
#include "serve/request.hpp"

namespace facegen::serve {

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
  auto spec = std::make_shared<const GenerateSpec>(parse_generate(req.body, service.facts.spec.latent_dim));
  check_answer(*spec, service.facts.spec.image_size);
  answer_with_images(service, spec, answer_product(*spec, service.facts), answer_is_gathered(*spec, service.facts),
                     [spec, &facts = service.facts](const MadeImages& made, HttpResponse& r) { answer_made(*spec, made, facts, r); }, res);
}

void image_by_seed(Service& service, const HttpRequest& req, HttpResponse& res) {
  const std::string name = req.path.substr(std::string("/v1/images/").size());
  if (name.size() < 5 || name.compare(name.size() - 4, 4, ".png") != 0) {
    throw RequestError(404, "no image '" + json::printable(name) + "': images are named /v1/images/SEED.png");
  }
  auto spec = std::make_shared<GenerateSpec>();
  spec->count = 1;
  spec->seeds.push_back(parse_seed(name.substr(0, name.size() - 4), "the SEED of /v1/images/SEED.png"));
  spec->latents.resize(static_cast<size_t>(service.facts.spec.latent_dim));
  seed_latent(spec->seeds[0], service.facts.spec.latent_dim, spec->latents.data());
  answer_with_images(service, spec, answer_product(*spec, service.facts), answer_is_gathered(*spec, service.facts),
                     [spec, &facts = service.facts](const MadeImages& made, HttpResponse& r) {
                       answer_made(*spec, made, facts, r);
                       r.fields.push_back({"Cache-Control", "public, max-age=31536000, immutable"});
                     }, res);
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
  auto request = std::make_shared<const InferRequest>(parse_infer(req.body, req.header(kOipBinaryLengthField), service.facts.spec.latent_dim));
  answer_with_images(service, std::shared_ptr<const GenerateSpec>(request, &request->images), ImageProduct::Pixels, request->binary_output,
                     [request, &spec = service.facts.spec](const MadeImages& made, HttpResponse& r) { answer_infer(*request, made, spec, r); },
                     res);
}

}  // namespace facegen::serve
