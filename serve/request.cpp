// request.cpp: the checks of request.hpp, one function per part of a request.
#include "serve/request.hpp"

#include <fast_float/fast_float.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "common/errors.hpp"
#include "latents/latent_source.hpp"
#include "latents/seed_list.hpp"
#include "serve/json.hpp"

namespace facegen::serve {
namespace {

[[noreturn]] void bad(const std::string& sentence) { throw RequestError(400, sentence); }

std::string count_limit() { return "at most " + std::to_string(kMaxRequestImages) + " images a request"; }

ResponseFormat format_named(const std::string& name) {
  if (name == "png") return {OutputFormat::Png, "png", "image/png"};
  if (name == "tar") return {OutputFormat::Tar, "tar", "application/x-tar"};
  if (name == "npy") return {OutputFormat::Npy, "npy", "application/octet-stream"};
  if (name == "npy-u8") return {OutputFormat::NpyU8, "npy-u8", "application/octet-stream"};
  if (name == "mosaic") return {OutputFormat::MosaicPng, "mosaic", "image/png"};
  bad("unknown \"format\" \"" + json::printable(name) + "\" (expected png, tar, npy, npy-u8 or mosaic)");
}

// Where in the request a value is: "element 0 of \"seeds\" (the first)", counting from 0 as JSON
// arrays are indexed, and saying so, so that it does not read as the seed 0.
std::string element_of(const char* array, int64_t k) {
  return "element " + std::to_string(k) + " of \"" + array + "\"" + (k == 0 ? " (the first)" : "");
}

// A tar answer names each sample by its seed (seed0042), as the batch tool's --seeds does: two samples
// of one seed would have one name.
void refuse_repeated_seed_keys(const GenerateSpec& spec) {
  if (spec.format.format != OutputFormat::Tar || spec.seeds.empty()) return;
  std::vector<std::pair<uint64_t, size_t>> sorted;
  for (size_t k = 0; k < spec.seeds.size(); ++k) sorted.push_back({spec.seeds[k], k});
  std::sort(sorted.begin(), sorted.end());
  for (size_t k = 1; k < sorted.size(); ++k) {
    if (sorted[k].first != sorted[k - 1].first) continue;
    bad("\"seeds\" lists " + std::to_string(sorted[k].first) + " twice (" + element_of("seeds", static_cast<int64_t>(sorted[k - 1].second)) +
        " and element " + std::to_string(sorted[k].second) + "), but a tar answer names each sample by its seed: list each "
        "seed once, or ask for npy, npy-u8 or mosaic");
  }
}

// truncation: a finite number above 0, for seeds only (--truncation's rules).
void read_truncation(const json::Value& body, GenerateSpec& spec) {
  const json::Value* truncation = body.find("truncation");
  if (truncation == nullptr) return;
  if (body.find("seeds") == nullptr) {
    bad("\"truncation\" applies to the latents of \"seeds\", but the request gives \"latents\" as they are");
  }
  const double value = truncation->is(json::Value::Kind::Number) ? std::strtod(truncation->text.c_str(), nullptr) : 0;
  if (!std::isfinite(value) || !(value > 0)) {
    bad("\"truncation\" must be a finite number greater than 0, got " +
        (truncation->is(json::Value::Kind::Number) ? truncation->text : json::kind_name(truncation->kind)));
  }
  spec.truncation = value;
}

// seeds: an array of whole numbers, each one image.
void read_seeds(const json::Value& seeds, int nz, GenerateSpec& spec) {
  if (!seeds.is(json::Value::Kind::Array)) bad(std::string("\"seeds\" must be an array of whole numbers, got ") + json::kind_name(seeds.kind));
  const int64_t n = static_cast<int64_t>(seeds.items.size());
  if (n == 0) bad("\"seeds\" is empty; give at least one seed");
  if (n > kMaxRequestImages) bad("\"seeds\" holds " + std::to_string(n) + " seeds, more than the " + count_limit());
  spec.count = n;
  spec.latents.resize(static_cast<size_t>(n * nz));
  for (int64_t k = 0; k < n; ++k) {
    const json::Value& seed = seeds.items[static_cast<size_t>(k)];
    const std::string where = element_of("seeds", k);
    if (!seed.is(json::Value::Kind::Number)) bad(where + " must be a whole number, got " + json::kind_name(seed.kind));
    spec.seeds.push_back(parse_seed(seed.text, where));
    seed_latent(spec.seeds.back(), nz, spec.latents.data() + k * nz, spec.truncation);  // (nz)
  }
}

float latent_value(const json::Value& value, int64_t image, int64_t index) {
  return latent_number(value, "value " + std::to_string(index) + " of " + element_of("latents", image));
}

// latents: an array of arrays of nz numbers.
void read_latents(const json::Value& latents, int nz, GenerateSpec& spec) {
  if (!latents.is(json::Value::Kind::Array)) bad(std::string("\"latents\" must be an array of arrays of numbers, got ") + json::kind_name(latents.kind));
  const int64_t n = static_cast<int64_t>(latents.items.size());
  if (n == 0) bad("\"latents\" is empty; give at least one latent");
  if (n > kMaxRequestImages) bad("\"latents\" holds " + std::to_string(n) + " latents, more than the " + count_limit());
  spec.count = n;
  spec.latents.resize(static_cast<size_t>(n * nz));
  for (int64_t k = 0; k < n; ++k) {
    const json::Value& latent = latents.items[static_cast<size_t>(k)];
    if (!latent.is(json::Value::Kind::Array) || static_cast<int64_t>(latent.items.size()) != nz) {
      bad(element_of("latents", k) + " must be an array of " + std::to_string(nz) + " numbers (the model's nz), got " +
          (latent.is(json::Value::Kind::Array) ? "one of " + std::to_string(latent.items.size()) : json::kind_name(latent.kind)));
    }
    for (int64_t v = 0; v < nz; ++v) spec.latents[static_cast<size_t>(k * nz + v)] = latent_value(latent.items[static_cast<size_t>(v)], k, v);
  }
}

int64_t whole_member(const json::Value& body, const char* name, int64_t low, int64_t high) {
  const json::Value* value = body.find(name);
  if (value == nullptr) return low;
  const std::string range = " from " + std::to_string(low) + " to " + std::to_string(high);
  if (!value->is(json::Value::Kind::Number) || value->text.find_first_not_of("0123456789") != std::string::npos ||
      value->text.size() > 9 || std::stoll(value->text) < low || std::stoll(value->text) > high) {
    bad(std::string("\"") + name + "\" must be a whole number" + range + ", got " +
        (value->is(json::Value::Kind::Number) ? value->text : json::kind_name(value->kind)));
  }
  return std::stoll(value->text);
}

void read_format(const json::Value& body, GenerateSpec& spec) {
  const json::Value* format = body.find("format");
  if (format != nullptr && !format->is(json::Value::Kind::String)) bad(std::string("\"format\" must be a string, got ") + json::kind_name(format->kind));
  spec.format = format_named(format != nullptr ? format->text : spec.count == 1 ? "png" : "tar");
  if (spec.format.format == OutputFormat::Png && spec.count != 1) {
    bad("\"format\" png holds one image, but the request asks for " + std::to_string(spec.count) +
        "; ask for tar, npy, npy-u8 or mosaic");
  }
  const bool mosaic = spec.format.format == OutputFormat::MosaicPng;
  for (const char* name : {"columns", "padding"}) {
    if (!mosaic && body.find(name) != nullptr) bad(std::string("\"") + name + "\" lays out a mosaic, but \"format\" is " + spec.format.name);
  }
  spec.columns = mosaic && body.find("columns") ? whole_member(body, "columns", 1, kMaxMosaicColumns) : 0;
  spec.padding = mosaic ? whole_member(body, "padding", 0, kMaxGridPadding) : 0;
}

}  // namespace

GenerateSpec parse_generate(const std::string& body, int nz) {
  json::Value root;
  try {
    root = json::parse(body);
  } catch (const json::ParseError& e) {
    bad(e.what());
  }
  if (!root.is(json::Value::Kind::Object)) bad(std::string("the body must be a JSON object, got ") + json::kind_name(root.kind));
  for (const auto& member : root.members) {
    const std::string& key = member.first;
    if (key != "seeds" && key != "latents" && key != "format" && key != "columns" && key != "padding" &&
        key != "truncation") {
      bad("unknown member \"" + json::printable(key) +
          "\" (expected seeds or latents, format, columns, padding, truncation)");
    }
  }
  const json::Value* seeds = root.find("seeds");
  const json::Value* latents = root.find("latents");
  if ((seeds == nullptr) == (latents == nullptr)) {
    bad("give exactly one of \"seeds\" (an array of whole numbers) or \"latents\" (an array of arrays of " +
        std::to_string(nz) + " numbers)");
  }
  GenerateSpec spec;
  read_truncation(root, spec);
  if (seeds != nullptr) read_seeds(*seeds, nz, spec);
  else read_latents(*latents, nz, spec);
  read_format(root, spec);
  refuse_repeated_seed_keys(spec);
  return spec;
}

float latent_number(const json::Value& value, const std::string& where) {
  if (!value.is(json::Value::Kind::Number)) bad(where + " must be a number, got " + json::kind_name(value.kind));
  float out = 0;
  const char* end = value.text.data() + value.text.size();
  const auto read = fast_float::from_chars(value.text.data(), end, out);
  if (read.ec != std::errc() || read.ptr != end || !std::isfinite(out)) {
    bad(where + " (" + value.text + ") is too large for a float; latents must be finite numbers");
  }
  return out;
}

uint64_t parse_seed(const std::string& text, const std::string& what) {
  const bool digits = !text.empty() && text.size() <= 20 && text.find_first_not_of("0123456789") == std::string::npos;
  if (digits && (text.size() < 20 || text <= "18446744073709551615")) return std::stoull(text);
  bad(what + " must be a whole number from 0 to 18446744073709551615, got '" + json::printable(text) + "'");
}

std::vector<uint64_t> parse_seed_query(const std::string& text) {
  SeedList list;
  try {
    list = SeedList::parse(text, "seeds");
  } catch (const UserError& e) {
    bad(json::printable(e.what(), 400));
  }
  if (list.count() > kMaxRequestImages) bad("seeds names " + std::to_string(list.count()) + " seeds, more than the " + count_limit());
  std::vector<uint64_t> seeds;
  for (int64_t k = 0; k < list.count(); ++k) seeds.push_back(list.seed_at(k));
  return seeds;
}

}  // namespace facegen::serve
