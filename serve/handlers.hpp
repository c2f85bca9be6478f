// handlers.hpp: what each route of routes.hpp does with a request for one of the models served (the
// one its URL names, or the default): fills the answer, or throws RequestError (its status and
// sentence), QueueFull (429), UserError (422) or another exception (500). routes.cpp chooses the
// handler and the model, checks the method and the token, and turns exceptions into answers.
#pragma once

#include "serve/http_message.hpp"
#include "serve/routes.hpp"

namespace facegen::serve {

using Handler = void (*)(Service& service, const ServedModel& model, const HttpRequest& request, HttpResponse& response);

void page(Service& service, const ServedModel& model, const HttpRequest& request, HttpResponse& response);
void healthz(Service& service, const ServedModel& model, const HttpRequest& request, HttpResponse& response);
void readyz(Service& service, const ServedModel& model, const HttpRequest& request, HttpResponse& response);
void metrics_text(Service& service, const ServedModel& model, const HttpRequest& request, HttpResponse& response);
void models_list(Service& service, const ServedModel& model, const HttpRequest& request, HttpResponse& response);
void generate(Service& service, const ServedModel& model, const HttpRequest& request, HttpResponse& response);
// /v1/images/SEED.png and /v1/models/NAME/images/SEED.png
void image_by_seed(Service& service, const ServedModel& model, const HttpRequest& request, HttpResponse& response);
void latents_of_seeds(Service& service, const ServedModel& model, const HttpRequest& request, HttpResponse& response);

// The Open Inference Protocol (oip.hpp) and Triton's extensions.
void v2_server_metadata(Service& service, const ServedModel& model, const HttpRequest& request, HttpResponse& response);
void v2_live(Service& service, const ServedModel& model, const HttpRequest& request, HttpResponse& response);
void v2_ready(Service& service, const ServedModel& model, const HttpRequest& request, HttpResponse& response);
void v2_model_metadata(Service& service, const ServedModel& model, const HttpRequest& request, HttpResponse& response);
void v2_model_config(Service& service, const ServedModel& model, const HttpRequest& request, HttpResponse& response);
void v2_model_stats(Service& service, const ServedModel& model, const HttpRequest& request, HttpResponse& response);
void v2_all_stats(Service& service, const ServedModel& model, const HttpRequest& request, HttpResponse& response);
void v2_repository_index(Service& service, const ServedModel& model, const HttpRequest& request, HttpResponse& response);
void v2_infer(Service& service, const ServedModel& model, const HttpRequest& request, HttpResponse& response);

// Whether an If-None-Match field's value names the entity tag `etag` ("\"abc\""): "*", or a list of
// tags of which one is it, weak or strong (a GET compares weakly, RFC 9110 13.1.2).
bool none_match_names(const std::string& field, const std::string& etag);

}  // namespace facegen::serve
