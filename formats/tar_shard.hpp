// tar_shard.hpp: the bytes of a WebDataset shard (the tar format of output_format.hpp): a POSIX ustar
// archive (IEEE Std 1003.1, pax's ustar interchange format) of regular-file members.
//
// A member is a 512-byte header then its data, padded with zeros to a multiple of 512; the archive
// ends with two zero blocks. The header: name, mode 0644, uid and gid 0, size in octal, mtime 0,
// typeflag '0', magic "ustar\0" and version "00", no user or group names; its checksum is the sum of
// its bytes with the checksum field read as spaces. Every field is fixed but the name and size, so a
// sample's bytes depend only on its image and facts: identical across runs, ranks and threads.
// A sample is KKKKKKKKK.png then KKKKKKKKK.json, KKKKKKKKK the image's index in 9 digits (more past a
// billion), or its seed_image_key (seed0042) where the run names images by seed: what webdataset
// groups by (the name up to its first dot).
#pragma once

#include <cstdint>
#include <string>

#include "formats/output_format.hpp"

namespace facegen {

constexpr int64_t kTarBlockBytes = 512;
constexpr int64_t kTarEndBytes = 2 * kTarBlockBytes;  // the archive's end: two zero blocks

// The 512-byte ustar header of a regular file `name` (at most 100 bytes) of `size` bytes (< 8 GiB).
std::string tar_header(const std::string& name, int64_t size);
// Appends a member: its header, its data, zeros up to the next block.
void append_tar_member(std::string& archive, const std::string& name, const std::string& data);
std::string sample_key(int64_t index, const SampleFacts& facts);  // "000000123", or "seed0042"
// A sample's json: {"index": 123, "random_seed": 1, "model": "m.bin", "model_xxh3": "9f86...e1",
// "precision": "fp32"}, with "seed" where the image has its own, "random_seed" where latents were
// drawn from the run's seed, and "truncation" after either where the draws were truncated
// (--truncation); "model" and "model_xxh3" null where there is none or it is unknown.
std::string sample_json(int64_t index, const SampleFacts& facts);
// A sample's bytes but its PNG's: the PNG member's header, and the json member unpadded (its header,
// then the json). The sample is png_header, the PNG, zeros to the next block, json_member, zeros to
// the next block: append_tar_sample, and the encoders that fill in the PNG (formats/encoded_run.hpp).
struct TarSampleFrame {
  std::string png_header;   // 512 bytes
  std::string json_member;  // 512 bytes of header, then the json
};
// Image `index`'s frame for a PNG of png_bytes, into `frame` (its strings reused): the definition of
// a sample's frame, made field by field.
void tar_sample_frame(int64_t index, int64_t png_bytes, const SampleFacts& facts, TarSampleFrame& frame);

// The same frames for a run of images, made in under a tenth of a microsecond each with no allocation
// (a tar job plans a million a second, on the thread that feeds the GPU where the others write):
// what every sample of the run shares (the headers' fixed fields and their checksum, the json's
// text after its numbers) is made once; per image only its key, its numbers, the json's size and
// the two checksums. Bytes equal tar_sample_frame's (tests/test_shards.cpp holds them so).
class TarFrameMaker {
 public:
  TarFrameMaker(int64_t png_bytes, const SampleFacts& facts);
  // Image `index`'s frame at `meta` (`capacity` bytes): the PNG member's header (kTarBlockBytes),
  // then the json member unpadded. Returns the json member's bytes; throws std::logic_error where
  // the frame passes `capacity`.
  int64_t make(int64_t index, char* meta, int64_t capacity) const;

 private:
  struct Header {            // a member's header with its name empty
    char bytes[kTarBlockBytes];
    uint32_t sum_but_name_and_size;  // its checksum's sum but for the name's and size's bytes
  };
  const SampleFacts& facts_;
  Header png_;        // its size field is the PNG's, the same for every image
  Header json_;       // its size field written per image
  uint32_t png_size_sum_ = 0;
  std::string json_tail_;  // the json after the index (and the image's seed): the same for every image
};
// The most bytes json_member takes for an image of a run of total_images images: every number at its
// widest (an index of total_images - 1, a seed of 20 digits).
int64_t max_json_member_bytes(int64_t total_images, const SampleFacts& facts);
constexpr int64_t tar_padded(int64_t bytes) { return (bytes + kTarBlockBytes - 1) / kTarBlockBytes * kTarBlockBytes; }
// Appends image `index`'s sample: its PNG (png, as the png format writes it) and its json.
void append_tar_sample(std::string& archive, int64_t index, const std::string& png, const SampleFacts& facts);

}  // namespace facegen
