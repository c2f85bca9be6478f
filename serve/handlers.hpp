// handlers.hpp: what each route of routes.hpp does with a request: fills the answer, or throws
// RequestError (its status and sentence), QueueFull (429), UserError (422) or another exception (500).
// routes.cpp chooses the handler, checks the method and the token, and turns exceptions into answers.
#pragma once

#include "serve/http_message.hpp"
#include "serve/routes.hpp"

namespace facegen::serve {

using Handler = void (*)(Service& service, const HttpRequest& request, HttpResponse& response);

void page(Service& service, const HttpRequest& request, HttpResponse& response);
void healthz(Service& service, const HttpRequest& request, HttpResponse& response);
void readyz(Service& service, const HttpRequest& request, HttpResponse& response);
void metrics_text(Service& service, const HttpRequest& request, HttpResponse& response);
void generate(Service& service, const HttpRequest& request, HttpResponse& response);
void image_by_seed(Service& service, const HttpRequest& request, HttpResponse& response);  // /v1/images/SEED.png
void latents_of_seeds(Service& service, const HttpRequest& request, HttpResponse& response);

// The Open Inference Protocol (oip.hpp).
void v2_server_metadata(Service& service, const HttpRequest& request, HttpResponse& response);
void v2_live(Service& service, const HttpRequest& request, HttpResponse& response);
void v2_ready(Service& service, const HttpRequest& request, HttpResponse& response);  // server and model
void v2_model_metadata(Service& service, const HttpRequest& request, HttpResponse& response);
void v2_infer(Service& service, const HttpRequest& request, HttpResponse& response);

}  // namespace facegen::serve
