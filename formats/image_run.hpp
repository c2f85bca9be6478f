// image_run.hpp: a run of generated images as the outputs receive them.
//
// Either float32 values (count, size, size, nc), C fastest, as the network leaves them, or, when every
// requested format is 8-bit (bmp, png, mosaic-png, tar, npy-u8), their 8-bit RGB pixels
// (count, size, size, 3): image_to_rgb8 of the values (channel_to_byte, a grey value repeated), made
// where the images were made (on the GPU for a CUDA run: 12 KB a 64x64 image cross PCIe instead of
// 48 KB). size is the model's image_size (common/model_spec.hpp: 32, 64 or 128). Every 8-bit writer
// reads pixels through rgb8_image(), so both encodings give the same bytes.
// A run may also come already in its output's bytes (`encoded`, formats/encoded_run.hpp, made on the
// GPU); the writers then write those, and may find no pixels at all (data null).
#pragma once

#include <cstdint>
#include <stdexcept>

namespace facegen {

enum class ImageEncoding { Float32, Rgb8 };
struct EncodedRun;  // formats/encoded_run.hpp

// Bytes of one image's 8-bit RGB pixels (size, size, 3).
constexpr int64_t rgb8_image_bytes(int size) { return int64_t{size} * size * 3; }

// The 8-bit RGB pixels (size, size, 3) of one image (size, size, nc): channel_to_byte, grey repeated
// (output_format.hpp has channel_to_byte; the CPU reference of the GPU's conversion).
void image_to_rgb8(const float* image, int image_channels, int size, unsigned char* rgb);

// Bytes of one image in `encoding`: size * size * nc float32 values, or size * size * 3 pixels.
constexpr int64_t image_bytes(ImageEncoding encoding, int channels, int size) {
  return encoding == ImageEncoding::Rgb8 ? rgb8_image_bytes(size) : int64_t{size} * size * channels * 4;
}

struct ImageRun {
  ImageEncoding encoding = ImageEncoding::Float32;
  const void* data = nullptr;
  int channels = 3;  // nc of the float32 values; Rgb8 pixels always have 3
  int size = 0;      // pixels a side
  const EncodedRun* encoded = nullptr;  // the run in its output's bytes, or null
  int64_t encoded_from = 0;             // this run's first image in `encoded`

  static ImageRun floats(const float* values, int channels, int size) {
    return {ImageEncoding::Float32, values, channels, size};
  }
  static ImageRun rgb8(const unsigned char* pixels, int channels, int size) {
    return {ImageEncoding::Rgb8, pixels, channels, size};
  }

  int64_t bytes_per_image() const { return image_bytes(encoding, channels, size); }
  int64_t values_per_image() const { return int64_t{size} * size * channels; }
  // The run from its image `images` on.
  ImageRun skip(int64_t images) const {
    const void* from = data ? static_cast<const char*>(data) + images * bytes_per_image() : nullptr;
    return {encoding, from, channels, size, encoded, encoded_from + images};
  }
  // The float32 values (count, size, size, nc); a logic error for 8-bit pixels (txt and npy need
  // floats, and a run that asks for them never makes 8-bit pixels).
  const float* values() const {
    if (encoding != ImageEncoding::Float32 || !data) throw std::logic_error("an 8-bit image run has no float32 values");
    return static_cast<const float*>(data);
  }
  // Image i's 8-bit RGB pixels (size, size, 3): in the run itself, or converted into `scratch`
  // (rgb8_image_bytes(size)) and returned there.
  const unsigned char* rgb8_image(int64_t i, unsigned char* scratch) const {
    if (!data) throw std::logic_error("an encoded image run came without its pixels");
    if (encoding == ImageEncoding::Rgb8) return static_cast<const unsigned char*>(data) + i * rgb8_image_bytes(size);
    image_to_rgb8(values() + i * values_per_image(), channels, size, scratch);
    return scratch;
  }
};

}  // namespace facegen
