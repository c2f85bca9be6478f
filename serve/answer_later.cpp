// answer_later.cpp: see answer_later.hpp.
#include "serve/answer_later.hpp"

#include "serve/request_threads.hpp"

namespace facegen::serve {
namespace {

// The answer to made images: the batcher's failure, a non-finite image, or fill()'s.
HttpResponse answer_of(const GenerateSpec& spec, const MadeImages& made, const FillAnswer& fill, Metrics& metrics) {
  HttpResponse response;
  try {
    if (made.error) std::rethrow_exception(made.error);
    if (made.non_finite()) {
      throw RequestError(422, "the model made a non-finite image from these latents; give latents of ordinary size (a Gaussian's values lie within +-8)");
    }
    fill(made, response);
    metrics.images(spec.count);
  } catch (...) {
    answer_error(std::current_exception(), response);
  }
  return response;
}

}  // namespace

void answer_with_images(Service& service, std::shared_ptr<const GenerateSpec> spec, ImageProduct product, bool quick,
                        FillAnswer fill, HttpResponse& response) {
  if (service.stopping) throw RequestError(503, "the service is stopping and takes no new work");
  response.later = [&service, spec = std::move(spec), product, quick, fill = std::move(fill)](HttpReply reply) {
    auto made = [&service, spec, quick, fill, reply](MadeImages images) {
      if (quick || service.request_threads == nullptr) return reply(answer_of(*spec, images, fill, service.metrics));
      service.request_threads->post([&service, spec, fill, reply, images = std::move(images)] {
        reply(answer_of(*spec, images, fill, service.metrics));
      });
    };
    try {
      service.batcher.submit(spec->latents.data(), spec->count, product, std::move(made));
    } catch (...) {
      HttpResponse refused;
      answer_error(std::current_exception(), refused);
      reply(std::move(refused));
    }
  };
}

}  // namespace facegen::serve
