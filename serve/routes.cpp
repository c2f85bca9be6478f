// routes.cpp: which handler (handlers.hpp) answers a request: the route table, the token, the method,
// and every exception turned into an answer of its status and counted in the metrics.
#include "serve/routes.hpp"

#include <chrono>
#include <cstdio>

#include "common/errors.hpp"
#include "serve/handlers.hpp"
#include "serve/json.hpp"
#include "serve/oip.hpp"
#include "serve/request.hpp"

namespace facegen::serve {
namespace {

struct Route {
  const char* path;   // the whole path, or (prefix) what it begins with, the rest holding no '/'
  bool prefix;
  const char* method; // "GET" (HEAD too) or "POST"
  const char* label;  // the route in facegen_requests_total
  bool slow;          // on a request thread (routes.hpp)
  bool guarded;       // needs the token, where the service has one
  Handler handle;
};

const Route kRoutes[] = {
    {"/", false, "GET", "/", false, false, page},
    {"/healthz", false, "GET", "/healthz", false, false, healthz},
    {"/readyz", false, "GET", "/readyz", false, false, readyz},
    {"/metrics", false, "GET", "/metrics", false, true, metrics_text},
    {"/v1/generate", false, "POST", "/v1/generate", true, true, generate},
    {"/v1/images/", true, "GET", "/v1/images", false, true, image_by_seed},
    {"/v1/latents", false, "GET", "/v1/latents", true, true, latents_of_seeds},
    {"/v2", false, "GET", "/v2", false, true, v2_server_metadata},
    {"/v2/health/live", false, "GET", "/v2/health", false, false, v2_live},
    {"/v2/health/ready", false, "GET", "/v2/health", false, false, v2_ready},
    {"/v2/models/facegen", false, "GET", "/v2/models", false, true, v2_model_metadata},
    {"/v2/models/facegen/versions/1", false, "GET", "/v2/models", false, true, v2_model_metadata},
    {"/v2/models/facegen/ready", false, "GET", "/v2/health", false, false, v2_ready},
    {"/v2/models/facegen/versions/1/ready", false, "GET", "/v2/health", false, false, v2_ready},
    {"/v2/models/facegen/infer", false, "POST", "/v2/infer", true, true, v2_infer},
    {"/v2/models/facegen/versions/1/infer", false, "POST", "/v2/infer", true, true, v2_infer},
};

const Route* route_of(const std::string& path) {
  for (const Route& route : kRoutes) {
    if (!route.prefix && path == route.path) return &route;
    const size_t n = std::char_traits<char>::length(route.path);
    if (route.prefix && path.compare(0, n, route.path) == 0 && path.find('/', n) == std::string::npos) return &route;
  }
  return nullptr;
}

// No route: the sentence names what was asked, and for /v2/models/ the model the service has.
std::string no_route(const HttpRequest& req) {
  const std::string models = "/v2/models/";
  if (req.path.compare(0, models.size(), models) == 0) {
    const std::string rest = req.path.substr(models.size());
    const std::string name = rest.substr(0, rest.find('/'));
    if (name != kOipModelName) {
      return "no model '" + json::printable(name) + "' (this service has one, facegen)";
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
  const Route* route = route_of(request.path);
  const bool heavy = request.body.empty() || request.body.size() > kQuickBodyBytes;  // /v1/latents; a large body
  return route != nullptr && route->slow && method_allowed(*route, request.method) && heavy;
}

HttpResponse Routes::answer(const HttpRequest& req) const {
  const auto start = std::chrono::steady_clock::now();
  HttpResponse res;
  const Route* route = route_of(req.path);
  const char* label = "other";
  try {
    const bool guarded = route ? route->guarded : req.path.compare(0, 4, "/v1/") == 0 || req.path.compare(0, 4, "/v2/") == 0;
    if (guarded && !service_.token.empty() && !bearer_matches(req.header("Authorization"), service_.token)) {
      res.fields.push_back({"WWW-Authenticate", "Bearer"});
      throw RequestError(401, "this service needs the header 'Authorization: Bearer TOKEN' with the token of its --token-file");
    }
    if (route == nullptr) throw RequestError(404, no_route(req));
    if (!method_allowed(*route, req.method)) {
      const bool get = std::string(route->method) == "GET";
      res.fields.push_back({"Allow", get ? "GET, HEAD" : route->method});
      throw RequestError(405, json::printable(req.method, 20) + " is not allowed on " + json::printable(req.path, 80) + "; it takes " + route->method);
    }
    label = route->label;
    route->handle(service_, req, res);
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

}  // namespace facegen::serve
