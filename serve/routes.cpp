// routes.cpp: the handlers of routes.hpp. Each handler runs inside answer(), which times it, turns
// every exception into a JSON error of the right status, and counts it in the metrics.
#include "serve/routes.hpp"

#include <httplib.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "common/errors.hpp"
#include "files/latent_source.hpp"
#include "serve/json.hpp"
#include "serve/page.hpp"

namespace facegen::serve {
namespace {

using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

void send_error(httplib::Response& res, int status, const std::string& sentence) {
  res.status = status;
  res.set_content(error_json(sentence), "application/json");
}

// Runs `handler`, then counts its answer under `route`.
httplib::Server::Handler answer(Service& service, const std::string& route, Handler handler) {
  return [&service, route, handler](const httplib::Request& req, httplib::Response& res) {
    const auto start = std::chrono::steady_clock::now();
    res.status = 200;  // unless the handler says otherwise
    try {
      handler(req, res);
    } catch (const RequestError& e) {
      send_error(res, e.status, e.what());
    } catch (const QueueFull& e) {
      send_error(res, 429, e.what());
    } catch (const UserError& e) {  // the model made a non-finite image from these latents
      send_error(res, 422, e.what());
    } catch (const std::exception& e) {
      send_error(res, 500, std::string("the service failed: ") + e.what());
    }
    service.metrics.request(route, res.status, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  };
}

// The images of a checked request, made by the batcher; a non-finite image is explained by the
// batch tool's own check (a UserError naming the latent or the layer).
std::vector<float> images_of(Service& service, const GenerateSpec& spec) {
  if (service.stopping) throw RequestError(503, "the service is stopping and takes no new work");
  const ModelSpec& model = service.facts.spec;
  std::vector<float> images(static_cast<size_t>(spec.count * model.image_values()));  // (count, 64, 64, nc)
  service.batcher.generate(spec.latents.data(), spec.count, images.data());
  for (float v : images) {
    if (!std::isfinite(v)) throw RequestError(422, "the model made a non-finite image from these latents; give latents of ordinary size (a Gaussian's values lie within +-8)");
  }
  service.metrics.images(spec.count);
  return images;
}

void generate(Service& service, const httplib::Request& req, httplib::Response& res) {
  const GenerateSpec spec = parse_generate(req.body, service.facts.spec.latent_dim);
  const std::vector<float> images = images_of(service, spec);
  res.set_content(encode_answer(spec, images.data(), service.facts), spec.format.content_type);
}

void image_by_seed(Service& service, const httplib::Request& req, httplib::Response& res) {
  const std::string name = req.matches[1];
  if (name.size() < 5 || name.compare(name.size() - 4, 4, ".png") != 0) {
    throw RequestError(404, "no image '" + json::printable(name) + "': images are named /v1/images/SEED.png");
  }
  GenerateSpec spec;
  spec.count = 1;
  spec.seeds.push_back(parse_seed(name.substr(0, name.size() - 4), "the SEED of /v1/images/SEED.png"));
  spec.latents.resize(static_cast<size_t>(service.facts.spec.latent_dim));
  seed_latent(spec.seeds[0], service.facts.spec.latent_dim, spec.latents.data());
  const std::vector<float> images = images_of(service, spec);
  res.set_header("Cache-Control", "public, max-age=31536000, immutable");
  res.set_content(encode_answer(spec, images.data(), service.facts), "image/png");
}

// {"latents": [[...], ...]}, each value with enough digits to read back as the same float.
void latents_of_seeds(Service& service, const httplib::Request& req, httplib::Response& res) {
  if (!req.has_param("seeds")) throw RequestError(400, "give the seeds as /v1/latents?seeds=3,5,100-103");
  const std::vector<uint64_t> seeds = parse_seed_query(req.get_param_value("seeds"));
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
  res.set_content(out + "]}\n", "application/json");
}

void readiness(Service& service, httplib::Response& res) {
  if (service.stopping) throw RequestError(503, "the service is stopping");
  res.set_content("{\"status\": \"ready\", \"workers\": " + std::to_string(service.batcher.workers()) + "}\n",
                  "application/json");
}

// The other methods on a known path: 405 with the method it takes.
void refuse_other_methods(httplib::Server& server, Service& service, const std::string& pattern, const char* allowed) {
  auto refuse = answer(service, "other", [allowed](const httplib::Request& req, httplib::Response& res) {
    res.set_header("Allow", allowed);
    throw RequestError(405, req.method + " is not allowed on " + json::printable(req.path, 80) + "; it takes " + allowed);
  });
  if (std::string(allowed) != "GET") server.Get(pattern, refuse);
  if (std::string(allowed) != "POST") server.Post(pattern, refuse);
  server.Put(pattern, refuse);
  server.Delete(pattern, refuse);
  server.Patch(pattern, refuse);
}

// With a token: /v1/ and /metrics only for "Authorization: Bearer TOKEN".
void require_token(httplib::Server& server, Service& service) {
  if (service.token.empty()) return;
  server.set_pre_routing_handler([&service](const httplib::Request& req, httplib::Response& res) {
    const bool guarded = req.path.compare(0, 4, "/v1/") == 0 || req.path == "/metrics";
    if (!guarded || bearer_matches(req.get_header_value("Authorization"), service.token)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    res.set_header("WWW-Authenticate", "Bearer");
    send_error(res, 401, "this service needs the header 'Authorization: Bearer TOKEN' with the token of its --token-file");
    service.metrics.request("other", 401, 0);
    return httplib::Server::HandlerResponse::Handled;
  });
}

}  // namespace

bool bearer_matches(const std::string& header, const std::string& token) {
  const std::string want = "Bearer " + token;
  unsigned char differ = header.size() == want.size() ? 0 : 1;
  for (size_t k = 0; k < want.size(); ++k) {
    differ |= static_cast<unsigned char>(want[k] ^ (k < header.size() ? header[k] : 0));
  }
  return differ == 0;
}

std::string error_json(const std::string& sentence) {
  std::string out = "{\"error\": \"";
  for (const char c : sentence) {
    if (c == '"' || c == '\\') {
      out += '\\', out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"}\n";
}

void add_routes(httplib::Server& server, Service& service) {
  using Req = httplib::Request;
  using Res = httplib::Response;
  require_token(server, service);
  server.Get("/", answer(service, "/", [](const Req&, Res& res) { res.set_content(page_html(), "text/html; charset=utf-8"); }));
  server.Get("/healthz", answer(service, "/healthz", [](const Req&, Res& res) { res.set_content("{\"status\": \"ok\"}\n", "application/json"); }));
  server.Get("/readyz", answer(service, "/readyz", [&service](const Req&, Res& res) { readiness(service, res); }));
  server.Post("/v1/generate", answer(service, "/v1/generate", [&service](const Req& req, Res& res) { generate(service, req, res); }));
  server.Get(R"(/v1/images/([^/]*))", answer(service, "/v1/images", [&service](const Req& req, Res& res) { image_by_seed(service, req, res); }));
  server.Get("/v1/latents", answer(service, "/v1/latents", [&service](const Req& req, Res& res) { latents_of_seeds(service, req, res); }));
  server.Get("/metrics", answer(service, "/metrics", [&service](const Req&, Res& res) {
    res.set_content(service.metrics.render(service.batcher.queued_images(), service.batcher.workers()),
                    "text/plain; version=0.0.4");
  }));
  for (const char* path : {"/", "/healthz", "/readyz", "/metrics", "/v1/latents", R"(/v1/images/([^/]*))"}) refuse_other_methods(server, service, path, "GET");
  refuse_other_methods(server, service, "/v1/generate", "POST");
  // What the library answers itself (no route, a malformed request, a body too large) gets a sentence too.
  server.set_error_handler(httplib::Server::HandlerWithResponse([&service](const Req& req, Res& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // a handler's own error
    std::string sentence = "the request could not be served (HTTP " + std::to_string(res.status) + ")";
    if (res.status == 404) sentence = "no route " + json::printable(req.method, 20) + " " + json::printable(req.path, 80) + " (see GET / and docs/service.md)";
    if (res.status == 413) sentence = "the body is larger than the " + std::to_string(kMaxBodyBytes >> 20) + " MiB the service reads";
    if (res.status == 400) sentence = "the HTTP request is malformed, or did not arrive whole within the service's time limit";
    if (res.status == 414) sentence = "the request's path is too long";
    res.set_content(error_json(sentence), "application/json");
    service.metrics.request("other", res.status, 0);
    return httplib::Server::HandlerResponse::Handled;
  }));
}

}  // namespace facegen::serve
