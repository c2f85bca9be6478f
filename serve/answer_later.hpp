// answer_later.hpp: the answer to a request that waits for images, made once they are, on no thread
// that waits: the handler hands the request's latents to the batcher and returns with
// HttpResponse::later set; when the batcher's worker has landed the last of the images, the answer is
// made on that worker's thread where it is only a header before the images' bytes (answer.hpp,
// answer_is_gathered), else on a request thread (an encoding that takes CPU), and handed to the reply
// of the HTTP layer, which writes it on the connection's own event loop.
#pragma once

#include <functional>
#include <memory>

#include "serve/batcher.hpp"
#include "serve/http_message.hpp"
#include "serve/request.hpp"
#include "serve/routes.hpp"

namespace facegen::serve {

// Fills the answer from the made images; may throw (answered as routes.hpp's answer_error says).
using FillAnswer = std::function<void(const MadeImages& made, HttpResponse& response)>;

// Sets response.later: the images of `spec` (its latents held by `spec` until they are made) in
// `product`, made by `model`'s batcher, then, unless the batcher failed (500) or an image is not
// finite (422), fill() on the worker's thread where `quick`, else on one of service.request_threads.
// The queue's refusals (429, 503) are answered at once through the reply. The inference is counted
// for Triton's statistics, made or failed. Throws RequestError (503) while stopping.
void answer_with_images(Service& service, const ServedModel& model, std::shared_ptr<const GenerateSpec> spec,
                        ImageProduct product, bool quick, FillAnswer fill, HttpResponse& response);

}  // namespace facegen::serve
