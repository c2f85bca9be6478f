// oip_answer.cpp: see oip.hpp: the answer to an inference request, its images as the 8-bit pixels of
// npy-u8, written as JSON numbers or as the bytes after the JSON.
#include <memory>

#include "formats/image_run.hpp"
#include "serve/json.hpp"
#include "serve/oip.hpp"

namespace facegen::serve {
namespace {

// "0" to "255": each pixel's JSON text.
const char* const kByteText[256] = {
#define FACEGEN_ROW(n) #n "0", #n "1", #n "2", #n "3", #n "4", #n "5", #n "6", #n "7", #n "8", #n "9"
    "0", "1", "2", "3", "4", "5", "6", "7", "8", "9",
    FACEGEN_ROW(1), FACEGEN_ROW(2), FACEGEN_ROW(3), FACEGEN_ROW(4), FACEGEN_ROW(5), FACEGEN_ROW(6), FACEGEN_ROW(7),
    FACEGEN_ROW(8), FACEGEN_ROW(9), FACEGEN_ROW(10), FACEGEN_ROW(11), FACEGEN_ROW(12), FACEGEN_ROW(13),
    FACEGEN_ROW(14), FACEGEN_ROW(15), FACEGEN_ROW(16), FACEGEN_ROW(17), FACEGEN_ROW(18), FACEGEN_ROW(19),
    FACEGEN_ROW(20), FACEGEN_ROW(21), FACEGEN_ROW(22), FACEGEN_ROW(23), FACEGEN_ROW(24),
    "250", "251", "252", "253", "254", "255"
#undef FACEGEN_ROW
};

}  // namespace

namespace {

// The answer's JSON before its data: the model, the id, the output's name, type and shape (count, S,
// S, 3); with binary output, its size in bytes, and the JSON ends here.
std::string answer_head(const InferRequest& request, const std::string& model, int size, bool binary, size_t pixel_bytes) {
  const int64_t count = request.images.count;
  const std::string side = std::to_string(size);
  std::string head = "{\"model_name\": " + json::quote(model) + ", \"model_version\": \"" + kOipModelVersion + "\"";
  if (request.has_id) head += ", \"id\": " + json::quote(request.id);
  head += ", \"outputs\": [{\"name\": \"images\", \"datatype\": \"UINT8\", \"shape\": [" + std::to_string(count) + ", " + side +
          ", " + side + ", 3]";
  if (binary) head += ", \"parameters\": {\"binary_data_size\": " + std::to_string(pixel_bytes) + "}}]}";
  return head;
}

// The JSON answer: the head, then every pixel as a number.
std::string json_answer(const InferRequest& request, const std::string& model, int size, const unsigned char* pixels,
                        size_t bytes) {
  std::string out = answer_head(request, model, size, false, bytes);
  out.reserve(out.size() + bytes * 4 + 32);
  out += ", \"data\": [";
  for (size_t k = 0; k < bytes; ++k) {
    if (k) out += ',';
    out += kByteText[pixels[k]];
  }
  out += "]}]}\n";
  return out;
}

}  // namespace

InferAnswer encode_infer(const InferRequest& request, const float* images, const ModelSpec& spec, const std::string& model) {
  const int64_t count = request.images.count;
  const int size = spec.image_size;
  const int64_t rgb_bytes = rgb8_image_bytes(size);
  std::string pixels(static_cast<size_t>(count * rgb_bytes), '\0');  // (count, S, S, 3)
  for (int64_t k = 0; k < count; ++k) {
    image_to_rgb8(images + k * spec.image_values(), spec.image_channels, size,
                  reinterpret_cast<unsigned char*>(&pixels[static_cast<size_t>(k * rgb_bytes)]));
  }
  InferAnswer answer;
  if (request.binary_output) {
    std::string head = answer_head(request, model, size, true, pixels.size());
    answer.json_length = std::to_string(head.size());
    answer.content_type = "application/octet-stream";
    answer.body = std::move(head) + pixels;
    return answer;
  }
  answer.body = json_answer(request, model, size, reinterpret_cast<const unsigned char*>(pixels.data()), pixels.size());
  answer.content_type = "application/json";
  return answer;
}

void answer_infer(const InferRequest& request, const std::string& model, const MadeImages& made, const ModelSpec& spec,
                  HttpResponse& response) {
  const int size = spec.image_size;
  const size_t image_bytes = static_cast<size_t>(rgb8_image_bytes(size));
  const size_t bytes = static_cast<size_t>(request.images.count) * image_bytes;
  if (!request.binary_output) {
    std::unique_ptr<unsigned char[]> pixels(new unsigned char[bytes]);  // (count, S, S, 3)
    made.copy_to(pixels.get(), image_bytes);
    response.set(200, "application/json", json_answer(request, model, size, pixels.get(), bytes));
    return;
  }
  std::string head = answer_head(request, model, size, true, bytes);
  response.fields.push_back({kOipBinaryLengthField, std::to_string(head.size())});
  response.set(200, "application/octet-stream", std::move(head));
  for (const ImagePiece& piece : made.pieces) {  // the pixels as the batcher left them
    response.slices.push_back({static_cast<const char*>(piece.images), static_cast<size_t>(piece.count) * image_bytes});
    response.holds.push_back(piece.hold);
  }
}

}  // namespace facegen::serve
