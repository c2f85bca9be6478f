// tar_shard.cpp: ustar members and WebDataset samples (see tar_shard.hpp).
#include "formats/tar_shard.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "common/text_format.hpp"

namespace facegen {
namespace {

// Writes `value` in octal into the `width`-byte field at `field`: width - 1 digits, then NUL.
void put_octal(char* field, size_t width, uint64_t value) {
  for (size_t i = width - 1; i-- > 0;) {
    field[i] = static_cast<char>('0' + (value & 7));
    value >>= 3;
  }
  if (value != 0) throw std::length_error("tar: a value too large for its ustar field");
  field[width - 1] = '\0';
}
void put_octal(std::string& header, size_t at, size_t width, uint64_t value) { put_octal(&header[at], width, value); }

constexpr size_t kNameBytes = 100;   // the header's name field: [0, 100)
constexpr size_t kSizeAt = 124, kSizeWidth = 12;
constexpr size_t kChecksumAt = 148, kChecksumWidth = 7;

uint32_t byte_sum(const char* bytes, size_t count) {
  uint32_t sum = 0;
  for (size_t i = 0; i < count; ++i) sum += static_cast<unsigned char>(bytes[i]);
  return sum;
}

// JSON's string escapes: quote, backslash and control characters; other bytes as they are.
std::string json_quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// tar_header into `header` (its memory reused).
void make_tar_header(const std::string& name, int64_t size, std::string& header) {
  if (name.empty() || name.size() > 100) throw std::invalid_argument("tar: member name of " + std::to_string(name.size()) + " bytes");
  header.assign(kTarBlockBytes, '\0');
  std::memcpy(&header[0], name.data(), name.size());   // name[100]
  put_octal(header, 100, 8, 0644);                     // mode
  put_octal(header, 108, 8, 0);                        // uid
  put_octal(header, 116, 8, 0);                        // gid
  put_octal(header, kSizeAt, kSizeWidth, static_cast<uint64_t>(size));  // size
  put_octal(header, 136, 12, 0);                       // mtime: fixed, so bytes never depend on when
  header[156] = '0';                                   // typeflag: a regular file
  std::memcpy(&header[257], "ustar", 6);               // magic, NUL-terminated
  header[263] = header[264] = '0';                     // version "00"
  std::memset(&header[kChecksumAt], ' ', 8);           // the checksum counts its own field as spaces
  put_octal(header, kChecksumAt, kChecksumWidth, byte_sum(header.data(), header.size()));  // six digits, NUL, a space
}

// Decimal digits of `value` at `at`; returns the end.
char* put_decimal(char* at, uint64_t value) {
  char digits[20];
  int count = 0;
  do {
    digits[count++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0);
  while (count > 0) *at++ = digits[--count];
  return at;
}

// A sample's key (sample_key) at `at`, without allocating; returns the end.
char* put_sample_key(char* at, int64_t index, const SampleFacts& facts) {
  if (facts.named_by_seed) {  // seed%04llu
    const uint64_t seed = facts.image_seed(index);
    std::memcpy(at, "seed", 4);
    at += 4;
    for (uint64_t below = 1000; below > 1 && seed < below; below /= 10) *at++ = '0';
    return put_decimal(at, seed);
  }
  const uint64_t value = static_cast<uint64_t>(index);  // %09lld
  for (uint64_t below = 100000000; below >= 1 && value < below; below /= 10) *at++ = '0';
  return value == 0 ? at : put_decimal(at, value);
}

}  // namespace

std::string tar_header(const std::string& name, int64_t size) {
  std::string header;
  make_tar_header(name, size, header);
  return header;
}

void append_tar_member(std::string& archive, const std::string& name, const std::string& data) {
  archive += tar_header(name, static_cast<int64_t>(data.size()));
  archive += data;
  const size_t tail = data.size() % kTarBlockBytes;
  if (tail != 0) archive.append(kTarBlockBytes - tail, '\0');
}

std::string sample_key(int64_t index, const SampleFacts& facts) {
  if (facts.named_by_seed) return seed_image_key(facts.image_seed(index));
  char key[32];
  std::snprintf(key, sizeof key, "%09lld", static_cast<long long>(index));
  return key;
}

namespace {
// A sample's json after its "index" and "seed" numbers: the same for every image of a run.
std::string sample_json_tail(const SampleFacts& facts) {
  std::string json;
  if (!facts.image_seed && facts.random) json += ", \"random_seed\": " + std::to_string(facts.random_seed);
  if ((facts.image_seed || facts.random) && facts.truncation > 0) {
    json += ", \"truncation\": " + shortest_decimal(facts.truncation);
  }
  json += ", \"model\": " + (facts.model.empty() ? std::string("null") : json_quoted(facts.model));
  json += ", \"model_xxh3\": " + (facts.model_xxh3.empty() ? std::string("null") : json_quoted(facts.model_xxh3));
  json += ", \"precision\": " + json_quoted(facts.precision) + "}\n";
  return json;
}
}  // namespace

std::string sample_json(int64_t index, const SampleFacts& facts) {
  std::string json = "{\"index\": " + std::to_string(index);
  if (facts.image_seed) json += ", \"seed\": " + std::to_string(facts.image_seed(index));
  return json + sample_json_tail(facts);
}

void tar_sample_frame(int64_t index, int64_t png_bytes, const SampleFacts& facts, TarSampleFrame& frame) {
  const std::string key = sample_key(index, facts);
  make_tar_header(key + ".png", png_bytes, frame.png_header);
  const std::string json = sample_json(index, facts);
  make_tar_header(key + ".json", static_cast<int64_t>(json.size()), frame.json_member);
  frame.json_member += json;
}

TarFrameMaker::TarFrameMaker(int64_t png_bytes, const SampleFacts& facts) : facts_(facts), json_tail_(sample_json_tail(facts)) {
  // Each header made by the definition with a one-byte name, then the name's byte and the size
  // field's left out of its sum.
  for (Header* header : {&png_, &json_}) {
    std::string made;
    make_tar_header("x", header == &png_ ? png_bytes : 0, made);
    made[0] = '\0';
    std::memset(&made[kChecksumAt], ' ', 8);
    header->sum_but_name_and_size = byte_sum(made.data(), made.size()) - byte_sum(&made[kSizeAt], kSizeWidth);
    std::memcpy(header->bytes, made.data(), sizeof header->bytes);
  }
  png_size_sum_ = byte_sum(&png_.bytes[kSizeAt], kSizeWidth);
}

int64_t TarFrameMaker::make(int64_t index, char* meta, int64_t capacity) const {
  char key[48];
  const size_t key_bytes = static_cast<size_t>(put_sample_key(key, index, facts_) - key);
  if (key_bytes + 5 > kNameBytes) throw std::logic_error("tar: a sample's key longer than a member's name holds");
  // The json: {"index": I[, "seed": S] and the run's tail.
  char head[96];
  char* end = head;
  std::memcpy(end, "{\"index\": ", 10);
  end = put_decimal(end + 10, static_cast<uint64_t>(index));
  if (facts_.image_seed) {
    std::memcpy(end, ", \"seed\": ", 10);
    end = put_decimal(end + 10, facts_.image_seed(index));
  }
  const int64_t head_bytes = end - head, json_bytes = head_bytes + static_cast<int64_t>(json_tail_.size());
  const int64_t member = kTarBlockBytes + json_bytes;
  if (kTarBlockBytes + member > capacity) throw std::logic_error("tar: a sample's frame is larger than its bound");
  // Each header: the run's, its name (key and extension), its size where it varies, its checksum.
  auto put_header = [&](const Header& base, const char* extension, size_t extension_bytes, char* out, int64_t size,
                        uint32_t size_sum) {
    std::memcpy(out, base.bytes, kTarBlockBytes);
    std::memcpy(out, key, key_bytes);
    std::memcpy(out + key_bytes, extension, extension_bytes);
    if (size >= 0) {
      put_octal(out + kSizeAt, kSizeWidth, static_cast<uint64_t>(size));
      size_sum = byte_sum(out + kSizeAt, kSizeWidth);
    }
    const uint32_t sum = base.sum_but_name_and_size + size_sum + byte_sum(key, key_bytes) + byte_sum(extension, extension_bytes);
    put_octal(out + kChecksumAt, kChecksumWidth, sum);
  };
  put_header(png_, ".png", 4, meta, -1, png_size_sum_);
  char* json_member = meta + kTarBlockBytes;
  put_header(json_, ".json", 5, json_member, json_bytes, 0);
  std::memcpy(json_member + kTarBlockBytes, head, static_cast<size_t>(head_bytes));
  std::memcpy(json_member + kTarBlockBytes + head_bytes, json_tail_.data(), json_tail_.size());
  return member;
}

int64_t max_json_member_bytes(int64_t total_images, const SampleFacts& facts) {
  SampleFacts widest = facts;
  if (widest.image_seed) widest.image_seed = [](int64_t) { return std::numeric_limits<uint64_t>::max(); };
  return kTarBlockBytes + static_cast<int64_t>(sample_json(std::max<int64_t>(0, total_images - 1), widest).size());
}

void append_tar_sample(std::string& archive, int64_t index, const std::string& png, const SampleFacts& facts) {
  thread_local TarSampleFrame frame;
  tar_sample_frame(index, static_cast<int64_t>(png.size()), facts, frame);
  archive += frame.png_header;
  archive += png;
  archive.append(static_cast<size_t>(tar_padded(static_cast<int64_t>(png.size())) - static_cast<int64_t>(png.size())), '\0');
  archive += frame.json_member;
  const int64_t member = static_cast<int64_t>(frame.json_member.size());
  archive.append(static_cast<size_t>(tar_padded(member) - member), '\0');
}

}  // namespace facegen
