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

// Writes `value` in octal into the `width`-byte field at `at`: width - 1 digits, then NUL.
void put_octal(std::string& header, size_t at, size_t width, uint64_t value) {
  for (size_t i = width - 1; i-- > 0;) {
    header[at + i] = static_cast<char>('0' + (value & 7));
    value >>= 3;
  }
  if (value != 0) throw std::length_error("tar: a value too large for its ustar field");
  header[at + width - 1] = '\0';
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
  put_octal(header, 124, 12, static_cast<uint64_t>(size));  // size
  put_octal(header, 136, 12, 0);                       // mtime: fixed, so bytes never depend on when
  header[156] = '0';                                   // typeflag: a regular file
  std::memcpy(&header[257], "ustar", 6);               // magic, NUL-terminated
  header[263] = header[264] = '0';                     // version "00"
  std::memset(&header[148], ' ', 8);                   // the checksum counts its own field as spaces
  uint32_t sum = 0;
  for (const char c : header) sum += static_cast<unsigned char>(c);
  put_octal(header, 148, 7, sum);                      // six digits, NUL, then the space left there
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

std::string sample_json(int64_t index, const SampleFacts& facts) {
  std::string json = "{\"index\": " + std::to_string(index);
  if (facts.image_seed) json += ", \"seed\": " + std::to_string(facts.image_seed(index));
  else if (facts.random) json += ", \"random_seed\": " + std::to_string(facts.random_seed);
  if ((facts.image_seed || facts.random) && facts.truncation > 0) {
    json += ", \"truncation\": " + shortest_decimal(facts.truncation);
  }
  json += ", \"model\": " + (facts.model.empty() ? std::string("null") : json_quoted(facts.model));
  json += ", \"model_xxh3\": " + (facts.model_xxh3.empty() ? std::string("null") : json_quoted(facts.model_xxh3));
  json += ", \"precision\": " + json_quoted(facts.precision) + "}\n";
  return json;
}

void tar_sample_frame(int64_t index, int64_t png_bytes, const SampleFacts& facts, TarSampleFrame& frame) {
  const std::string key = sample_key(index, facts);
  make_tar_header(key + ".png", png_bytes, frame.png_header);
  const std::string json = sample_json(index, facts);
  make_tar_header(key + ".json", static_cast<int64_t>(json.size()), frame.json_member);
  frame.json_member += json;
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
