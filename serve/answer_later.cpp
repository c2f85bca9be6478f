// answer_later.cpp: see answer_later.hpp.
#include "serve/answer_later.hpp"

#include <chrono>

#include "serve/request_threads.hpp"

namespace facegen::serve {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The answer to made images: the batcher's failure, a non-finite image, or fill()'s; the inference
// of model `model` (its index) counted, made or failed, from `start`.
HttpResponse answer_of(const GenerateSpec& spec, const MadeImages& made, const FillAnswer& fill, Metrics& metrics,
                       size_t model, Clock::time_point start) {
  HttpResponse response;
  try {
    if (made.error) std::rethrow_exception(made.error);
    if (made.non_finite()) {
      throw RequestError(422, "the model made a non-finite image from these latents; give latents of ordinary size (a Gaussian's values lie within +-8)");
    }
  } catch (...) {
    metrics.inference(model, spec.count, false, seconds_since(start));
    answer_error(std::current_exception(), response);
    return response;
  }
  metrics.inference(model, spec.count, true, seconds_since(start));
  try {
    fill(made, response);
  } catch (...) {
    answer_error(std::current_exception(), response);
  }
  return response;
}

}  // namespace

void answer_with_images(Service& service, const ServedModel& model, std::shared_ptr<const GenerateSpec> spec,
                        ImageProduct product, bool quick, FillAnswer fill, HttpResponse& response) {
  if (service.stopping) throw RequestError(503, "the service is stopping and takes no new work");
  const size_t index = service.index_of(model);
  response.later = [&service, &model, index, spec = std::move(spec), product, quick, fill = std::move(fill)](HttpReply reply) {
    const Clock::time_point start = Clock::now();
    auto made = [&service, index, start, spec, quick, fill, reply](MadeImages images) {
      if (quick || service.request_threads == nullptr) {
        return reply(answer_of(*spec, images, fill, service.metrics, index, start));
      }
      service.request_threads->post([&service, index, start, spec, fill, reply, images = std::move(images)] {
        reply(answer_of(*spec, images, fill, service.metrics, index, start));
      });
    };
    try {
      model.batcher.submit(spec->latents.data(), spec->count, product, std::move(made));
    } catch (...) {
      service.metrics.inference(index, spec->count, false, seconds_since(start));
      HttpResponse refused;
      answer_error(std::current_exception(), refused);
      reply(std::move(refused));
    }
  };
}

}  // namespace facegen::serve
