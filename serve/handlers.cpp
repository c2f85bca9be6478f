// handlers.cpp: see handlers.hpp. The generating handlers hand their latents to the batcher and
// answer later, once the images are made (answer_later.hpp).
#include "serve/handlers.hpp"

#include <cstdio>
#include <string>
#include <vector>

#include "common/build_info.hpp"
#include "latents/latent_source.hpp"
#include "serve/answer_later.hpp"
#include "serve/json.hpp"
#include "serve/oip.hpp"
#include "serve/page.hpp"
#include "serve/request.hpp"

namespace facegen::serve {
namespace {

// The entity tags of a list, each without W/ (a weak tag compares as the strong one here).
std::vector<std::string> entity_tags(const std::string& field) {
  std::vector<std::string> tags;
  size_t at = 0;
  while (at < field.size()) {
    at = field.find_first_not_of(" \t,", at);
    if (at == std::string::npos) break;
    if (field.compare(at, 2, "W/") == 0) at += 2;
    if (field[at] != '"') {  // not a tag ("*" or a malformed value): up to the next comma
      const size_t comma = field.find(',', at);
      tags.push_back(field.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
      at = comma;
      continue;
    }
    const size_t close = field.find('"', at + 1);
    if (close == std::string::npos) break;
    tags.push_back(field.substr(at, close - at + 1));
    at = close + 1;
  }
  return tags;
}

}  // namespace

bool none_match_names(const std::string& field, const std::string& etag) {
  for (const std::string& tag : entity_tags(field)) {
    if (tag == "*" || tag == etag) return true;
  }
  return false;
}

void page(Service&, const ServedModel&, const HttpRequest&, HttpResponse& res) { res.set(200, "text/html; charset=utf-8", page_html()); }

void healthz(Service&, const ServedModel&, const HttpRequest&, HttpResponse& res) { res.set(200, "application/json", "{\"status\": \"ok\"}\n"); }

void readyz(Service& service, const ServedModel&, const HttpRequest&, HttpResponse& res) {
  if (service.stopping) throw RequestError(503, "the service is stopping");
  size_t workers = 0;
  for (const ServedModel& model : service.models) workers += model.batcher.workers();
  res.set(200, "application/json", "{\"status\": \"ready\", \"workers\": " + std::to_string(workers) + "}\n");
}

void metrics_text(Service& service, const ServedModel&, const HttpRequest&, HttpResponse& res) {
  std::vector<ModelGauges> gauges;
  for (const ServedModel& model : service.models) gauges.push_back({model.batcher.queued_images(), model.batcher.workers()});
  res.set(200, "text/plain; version=0.0.4", service.metrics.render(gauges));
}

void models_list(Service& service, const ServedModel&, const HttpRequest&, HttpResponse& res) {
  std::string out = "{\"default\": " + json::quote(service.models.front().name) + ", \"models\": [";
  for (const ServedModel& model : service.models) {
    out += std::string(&model == &service.models.front() ? "" : ", ") + "{\"name\": " + json::quote(model.name) +
           ", \"file\": " + (model.facts.model.empty() ? "null" : json::quote(model.facts.model)) + ", \"xxh3\": " +
           (model.facts.model_xxh3.empty() ? "null" : json::quote(model.facts.model_xxh3)) +
           ", \"precision\": " + json::quote(model.facts.precision) + ", \"device\": " + json::quote(model.device) +
           ", \"nz\": " + std::to_string(model.facts.spec.latent_dim) + ", \"nc\": " +
           std::to_string(model.facts.spec.image_channels) + ", \"images\": \"/v1/models/" + model.name + "/images/SEED.png\"}";
  }
  res.set(200, "application/json", out + "]}\n");
}

void generate(Service& service, const ServedModel& model, const HttpRequest& req, HttpResponse& res) {
  auto spec = std::make_shared<const GenerateSpec>(parse_generate(req.body, model.facts.spec.latent_dim));
  check_answer(*spec, model.facts.spec.image_size);
  answer_with_images(service, model, spec, answer_product(*spec, model.facts), answer_is_gathered(*spec, model.facts),
                     [spec, &facts = model.facts](const MadeImages& made, HttpResponse& r) { answer_made(*spec, made, facts, r); }, res);
}

// The bytes of an image depend on its seed and on what the model's tag hashes: the tag is the ETag.
// A URL that names the model (/v1/models/NAME/images/) is cached for a year; the default model's
// /v1/images/ names none (a restart with another --model serves other bytes there), so a cache must
// ask each time (no-cache), with If-None-Match, and is told the URL that names the model.
void image_by_seed(Service& service, const ServedModel& model, const HttpRequest& req, HttpResponse& res) {
  const std::string name = req.path.substr(req.path.rfind('/') + 1);
  const std::string pattern = req.path.substr(0, req.path.rfind('/') + 1) + "SEED.png";
  if (name.size() < 5 || name.compare(name.size() - 4, 4, ".png") != 0) {
    throw RequestError(404, "no image '" + json::printable(name) + "': images are named " + pattern);
  }
  auto spec = std::make_shared<GenerateSpec>();
  spec->count = 1;
  spec->seeds.push_back(parse_seed(name.substr(0, name.size() - 4), "the SEED of " + pattern));
  const bool named = req.path.compare(0, 11, "/v1/models/") == 0;
  const std::string etag = "\"" + model.image_tag + "\"";
  // The fields of the image's answer, and of a 304 in its place.
  std::vector<HttpField> fields{{"ETag", etag}, {"Cache-Control", named ? "public, max-age=31536000, immutable" : "public, no-cache"}};
  if (!named) fields.push_back({"Content-Location", "/v1/models/" + model.name + "/images/" + name});
  if (none_match_names(req.header("If-None-Match"), etag)) {
    res.fields.insert(res.fields.end(), fields.begin(), fields.end());
    res.set(304, "", "");
    return;
  }
  spec->latents.resize(static_cast<size_t>(model.facts.spec.latent_dim));
  seed_latent(spec->seeds[0], model.facts.spec.latent_dim, spec->latents.data());
  answer_with_images(service, model, spec, answer_product(*spec, model.facts), answer_is_gathered(*spec, model.facts),
                     [spec, &facts = model.facts, fields](const MadeImages& made, HttpResponse& r) {
                       answer_made(*spec, made, facts, r);
                       r.fields.insert(r.fields.end(), fields.begin(), fields.end());
                     }, res);
}

// {"latents": [[...], ...]}, each value with enough digits to read back as the same float.
void latents_of_seeds(Service&, const ServedModel& model, const HttpRequest& req, HttpResponse& res) {
  const std::optional<std::string> list = req.param("seeds");
  if (!list) throw RequestError(400, "give the seeds as /v1/latents?seeds=3,5,100-103");
  const std::vector<uint64_t> seeds = parse_seed_query(*list);
  const int nz = model.facts.spec.latent_dim;
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

void v2_server_metadata(Service&, const ServedModel&, const HttpRequest&, HttpResponse& res) {
  res.set(200, "application/json", oip_server_metadata(git_commit()));
}

// The protocol's health answers are their status; their body is empty.
void v2_live(Service&, const ServedModel&, const HttpRequest&, HttpResponse& res) { res.set(200, "", ""); }

void v2_ready(Service& service, const ServedModel&, const HttpRequest&, HttpResponse& res) {
  if (service.stopping) throw RequestError(400, "the service is stopping");  // the protocol's "not ready" is a 4xx
  res.set(200, "", "");
}

void v2_model_metadata(Service&, const ServedModel& model, const HttpRequest&, HttpResponse& res) {
  res.set(200, "application/json", oip_model_metadata(model.name, model.facts.spec));
}

void v2_model_config(Service& service, const ServedModel& model, const HttpRequest&, HttpResponse& res) {
  OipModelConfig config{model.name, model.facts.spec, service.max_batch, service.max_delay_ms, model.device == "cuda",
                        static_cast<int>(model.batcher.workers())};
  res.set(200, "application/json", oip_model_config(config));
}

void v2_model_stats(Service& service, const ServedModel& model, const HttpRequest&, HttpResponse& res) {
  res.set(200, "application/json", "{\"model_stats\": [" + service.metrics.model_stats_json(service.index_of(model)) + "]}\n");
}

void v2_all_stats(Service& service, const ServedModel&, const HttpRequest&, HttpResponse& res) {
  std::string stats;
  for (size_t k = 0; k < service.models.size(); ++k) stats += (k ? ", " : "") + service.metrics.model_stats_json(k);
  res.set(200, "application/json", "{\"model_stats\": [" + stats + "]}\n");
}

void v2_repository_index(Service& service, const ServedModel&, const HttpRequest& req, HttpResponse& res) {
  const bool ready_only = parse_repository_index(req.body);
  std::vector<std::string> names;
  // Every model is loaded for as long as the service runs: READY, but while it stops.
  if (!(ready_only && service.stopping)) {
    for (const ServedModel& model : service.models) names.push_back(model.name);
  }
  res.set(200, "application/json", oip_repository_index(names, service.stopping ? "UNAVAILABLE" : "READY"));
}

void v2_infer(Service& service, const ServedModel& model, const HttpRequest& req, HttpResponse& res) {
  auto request = std::make_shared<const InferRequest>(parse_infer(req.body, req.header(kOipBinaryLengthField), model.facts.spec.latent_dim));
  answer_with_images(service, model, std::shared_ptr<const GenerateSpec>(request, &request->images), ImageProduct::Pixels,
                     request->binary_output,
                     [request, &name = model.name, &spec = model.facts.spec](const MadeImages& made, HttpResponse& r) {
                       answer_infer(*request, name, made, spec, r);
                     },
                     res);
}

}  // namespace facegen::serve
