// routes.cpp: which handler (handlers.hpp) answers a request: the route table, the token, the method,
// and every exception turned into an answer of its status and counted in the metrics.
#include "serve/routes.hpp"

#include <chrono>
#include <cstdio>
#include <vector>

#include "common/build_info.hpp"
#include "common/content_hash.hpp"

#include "common/errors.hpp"
#include "serve/handlers.hpp"
#include "serve/json.hpp"
#include "serve/oip.hpp"
#include "serve/request.hpp"

namespace facegen::serve {
namespace {

struct Route {
  const char* path;   // the whole path; "*" a model's name; ending in '/' (prefix) a last part of any name
  const char* method; // "GET" (HEAD too) or "POST"
  const char* label;  // the route in facegen_requests_total
  bool slow;          // on a request thread (routes.hpp)
  bool guarded;       // needs the token, where the service has one
  Handler handle;
};

const Route kRoutes[] = {
    {"/", "GET", "/", false, false, page},
    {"/healthz", "GET", "/healthz", false, false, healthz},
    {"/readyz", "GET", "/readyz", false, false, readyz},
    {"/metrics", "GET", "/metrics", false, true, metrics_text},
    {"/v1/models", "GET", "/v1/models", false, true, models_list},
    {"/v1/generate", "POST", "/v1/generate", true, true, generate},
    {"/v1/models/*/generate", "POST", "/v1/generate", true, true, generate},
    {"/v1/images/", "GET", "/v1/images", false, true, image_by_seed},
    {"/v1/models/*/images/", "GET", "/v1/images", false, true, image_by_seed},
    {"/v1/latents", "GET", "/v1/latents", true, true, latents_of_seeds},
    {"/v1/models/*/latents", "GET", "/v1/latents", true, true, latents_of_seeds},
    {"/v2", "GET", "/v2", false, true, v2_server_metadata},
    {"/v2/health/live", "GET", "/v2/health", false, false, v2_live},
    {"/v2/health/ready", "GET", "/v2/health", false, false, v2_ready},
    {"/v2/repository/index", "POST", "/v2/repository", false, true, v2_repository_index},
    {"/v2/models/stats", "GET", "/v2/stats", false, true, v2_all_stats},
    {"/v2/models/*", "GET", "/v2/models", false, true, v2_model_metadata},
    {"/v2/models/*/versions/1", "GET", "/v2/models", false, true, v2_model_metadata},
    {"/v2/models/*/ready", "GET", "/v2/health", false, false, v2_ready},
    {"/v2/models/*/versions/1/ready", "GET", "/v2/health", false, false, v2_ready},
    {"/v2/models/*/config", "GET", "/v2/config", false, true, v2_model_config},
    {"/v2/models/*/versions/1/config", "GET", "/v2/config", false, true, v2_model_config},
    {"/v2/models/*/stats", "GET", "/v2/stats", false, true, v2_model_stats},
    {"/v2/models/*/versions/1/stats", "GET", "/v2/stats", false, true, v2_model_stats},
    {"/v2/models/*/infer", "POST", "/v2/infer", true, true, v2_infer},
    {"/v2/models/*/versions/1/infer", "POST", "/v2/infer", true, true, v2_infer},
};

std::vector<std::string> parts_of(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t slash; (slash = path.find('/', start)) != std::string::npos; start = slash + 1) {
    parts.push_back(path.substr(start, slash - start));
  }
  parts.push_back(path.substr(start));
  return parts;
}

// Whether `path` is the route's, and then the model's name it holds ("" where it holds none).
bool matches(const Route& route, const std::vector<std::string>& path, std::string& model) {
  const std::string whole = route.path;
  const std::vector<std::string> pattern = parts_of(whole);
  const bool prefix = whole.size() > 1 && whole.back() == '/';
  if (path.size() != pattern.size()) return false;
  model.clear();
  for (size_t k = 0; k < pattern.size(); ++k) {
    if (prefix && k + 1 == pattern.size()) break;  // any last part
    if (pattern[k] == "*") {
      if (path[k].empty()) return false;
      model = path[k];
    } else if (pattern[k] != path[k]) {
      return false;
    }
  }
  return true;
}

// The route of `path` and the name of the model it names ("" where it names none), or null.
const Route* route_of(const std::string& path, std::string& model) {
  const std::vector<std::string> parts = parts_of(path);
  for (const Route& route : kRoutes) {
    if (matches(route, parts, model)) return &route;
  }
  return nullptr;
}

// No route: the sentence names what was asked, and for /v1/models/ and /v2/models/ the models the
// service has or the one version each has.
std::string no_route(const Service& service, const HttpRequest& req) {
  for (const std::string models : {"/v2/models/", "/v1/models/"}) {
    if (req.path.compare(0, models.size(), models) != 0) continue;
    const std::vector<std::string> rest = parts_of(req.path.substr(models.size()));
    if (service.model(rest[0]) == nullptr) {
      return "no model '" + json::printable(rest[0]) + "' (this service has " + service.model_names() + ")";
    }
    if (rest.size() > 2 && rest[1] == "versions" && rest[2] != kOipModelVersion) {
      return "no version '" + json::printable(rest[2]) + "' of model " + rest[0] + " (it has version 1)";
    }
  }
  return "no route " + json::printable(req.method, 20) + " " + json::printable(req.path, 80) + " (see GET / and docs/service.md)";
}

bool method_allowed(const Route& route, const std::string& method) {
  return method == route.method || (method == "HEAD" && std::string(route.method) == "GET");
}

}  // namespace

// A body past this is read on a request thread (about 50 us of JSON); the 64 seeds of a request
// are 1 KiB.
constexpr size_t kQuickBodyBytes = 16 << 10;

bool Routes::slow(const HttpRequest& request) const {
  std::string model;
  const Route* route = route_of(request.path, model);
  const bool heavy = request.body.empty() || request.body.size() > kQuickBodyBytes;  // /v1/latents; a large body
  return route != nullptr && route->slow && method_allowed(*route, request.method) && heavy;
}

HttpResponse Routes::answer(const HttpRequest& req) const {
  const auto start = std::chrono::steady_clock::now();
  HttpResponse res;
  std::string model_name;
  const Route* route = route_of(req.path, model_name);
  const ServedModel* model = route == nullptr ? nullptr : model_name.empty() ? &service_.models.front() : service_.model(model_name);
  const char* label = "other";
  try {
    const bool guarded = route ? route->guarded : req.path.compare(0, 4, "/v1/") == 0 || req.path.compare(0, 4, "/v2/") == 0;
    if (guarded && !service_.token.empty() && !bearer_matches(req.header("Authorization"), service_.token)) {
      res.fields.push_back({"WWW-Authenticate", "Bearer"});
      throw RequestError(401, "this service needs the header 'Authorization: Bearer TOKEN' with the token of its --token-file");
    }
    if (route == nullptr || model == nullptr) throw RequestError(404, no_route(service_, req));
    if (!method_allowed(*route, req.method)) {
      const bool get = std::string(route->method) == "GET";
      res.fields.push_back({"Allow", get ? "GET, HEAD" : route->method});
      throw RequestError(405, json::printable(req.method, 20) + " is not allowed on " + json::printable(req.path, 80) + "; it takes " + route->method);
    }
    label = route->label;
    route->handle(service_, *model, req, res);
  } catch (...) {
    answer_error(std::current_exception(), res);
  }
  Metrics& metrics = service_.metrics;
  if (res.later) {  // counted once made
    res.later = [later = std::move(res.later), label, start, &metrics](HttpReply reply) {
      later([reply = std::move(reply), label, start, &metrics](HttpResponse made) {
        metrics.request(label, made.status, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        reply(std::move(made));
      });
    };
    return res;
  }
  metrics.request(label, res.status, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return res;
}

void answer_error(std::exception_ptr error, HttpResponse& res) {
  res.later = nullptr;
  try {
    std::rethrow_exception(error);
  } catch (const RequestError& e) {
    res.set(e.status, "application/json", error_json(e.what()));
  } catch (const QueueFull& e) {
    res.set(429, "application/json", error_json(e.what()));
  } catch (const UserError& e) {  // the model made a non-finite image from these latents
    res.set(422, "application/json", error_json(e.what()));
  } catch (const std::exception& e) {
    res.set(500, "application/json", error_json(std::string("the service failed: ") + e.what()));
  } catch (...) {
    res.set(500, "application/json", error_json("the service failed"));
  }
}

HttpResponse Routes::refusal(const HttpRefusal& refusal) const {
  HttpResponse res;
  res.set(refusal.status, "application/json", error_json(refusal.sentence));
  res.close = true;
  if (refusal.status == 503) res.fields.push_back({"Retry-After", "1"});
  service_.metrics.request("other", refusal.status, 0);
  return res;
}

bool bearer_matches(const std::string& header, const std::string& token) {
  const std::string want = "Bearer " + token;
  unsigned char differ = header.size() == want.size() ? 0 : 1;
  for (size_t k = 0; k < want.size(); ++k) {
    differ |= static_cast<unsigned char>(want[k] ^ (k < header.size() ? header[k] : 0));
  }
  return differ == 0;
}

std::string error_json(const std::string& sentence) { return "{\"error\": " + json::quote(sentence) + "}\n"; }

const ServedModel* Service::model(const std::string& name) const {
  for (const ServedModel& served : models) {
    if (served.name == name) return &served;
  }
  return nullptr;
}

std::string Service::model_names() const {
  std::string names;
  for (const ServedModel& served : models) names += (names.empty() ? "" : ", ") + served.name;
  return names;
}

std::string image_tag(const ServiceFacts& facts, const std::string& device, const std::string& weights) {
  const std::string decided = weights + " " + facts.precision + " " + device + " png-level " +
                              std::to_string(facts.png_level) + " " + git_commit();
  return content_digest(decided.data(), decided.size()).hex().substr(0, 16);
}

}  // namespace facegen::serve
