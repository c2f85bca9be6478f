// test_summary.cpp: the run summary's JSON as a pipeline reads it: one entry per file (path, format,
// images, bytes, XXH3-128 of its bytes on disk), streamed a batch at a time whatever the file count;
// every output with a brace pattern that expands (by the rules of bash and webdataset's braceexpand,
// written out here) to exactly its files' names; and the JSON of a failed run.
#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/content_hash.hpp"
#include "formats/output_format.hpp"
#include "latents/seed_list.hpp"
#include "run/summary.hpp"
#include "tests/test_support.hpp"

using namespace facegen;
using namespace facegen_test;

namespace {

// A brace expansion written from its rules, as the reference: "{A..B}" with digits, zero-padded to
// A's width where A has a leading zero; "{x,y}" lists, nested; the rest literal.
std::vector<std::string> expand(const std::string& pattern) {
  const size_t open = pattern.find('{');
  if (open == std::string::npos) return {pattern};
  int depth = 0;
  size_t close = open;
  std::vector<size_t> commas;
  for (size_t k = open; k < pattern.size(); ++k) {
    if (pattern[k] == '{') ++depth;
    if (pattern[k] == '}' && --depth == 0) {
      close = k;
      break;
    }
    if (pattern[k] == ',' && depth == 1) commas.push_back(k);
  }
  REQUIRE(close > open);
  const std::string head = pattern.substr(0, open), inner = pattern.substr(open + 1, close - open - 1);
  const std::vector<std::string> tails = expand(pattern.substr(close + 1));
  std::vector<std::string> choices;
  const size_t dots = inner.find("..");
  if (commas.empty() && dots != std::string::npos && inner.find('{') == std::string::npos) {
    const std::string a = inner.substr(0, dots), b = inner.substr(dots + 2);
    const size_t width = a.size() > 1 && a[0] == '0' ? a.size() : 0;
    for (uint64_t v = std::stoull(a), last = std::stoull(b);; ++v) {  // up to 2^64 - 1 without overflow
      std::string text = std::to_string(v);
      if (text.size() < width) text.insert(0, width - text.size(), '0');
      choices.push_back(text);
      if (v == last) break;
    }
  } else {
    size_t from = 0;
    commas.push_back(close);
    for (size_t comma : commas) {
      for (const std::string& choice : expand(inner.substr(from, comma - open - 1 - from))) choices.push_back(choice);
      from = comma - open;
    }
  }
  std::vector<std::string> out;
  for (const std::string& choice : choices) {
    for (const std::string& tail : tails) out.push_back(head + choice + tail);
  }
  return out;
}

RunSummary summary_of(const std::vector<OutputLayout>& layouts) {
  RunSummary summary;
  summary.output_prefix = layouts.front().describe();
  for (const OutputLayout& layout : layouts) summary.outputs.push_back({layout, 0});
  return summary;
}

}  // namespace

TEST_CASE("summary JSON: every file of every output, its bytes and XXH3 as on disk, streamed a batch at a time") {
  std::mt19937_64 rng(20261128);
  for (const int64_t shards : {1, 3, 257, 600}) {
    CAPTURE(shards);
    TempDir dir;
    OutputOptions options;
    options.shard_images = 2;
    const int64_t images = 2 * shards - 1;  // the last shard shorter
    const OutputLayout tar(OutputFormat::Tar, dir.file("r"), images, options);
    const OutputLayout bmp(OutputFormat::Bmp, dir.file("r"), images, options);
    REQUIRE(tar.file_count() == static_cast<size_t>(shards));
    // Files of odd random sizes, from empty up, at the layouts' paths: the summary reads what is there.
    std::vector<std::string> contents;
    for (size_t k = 0; k < tar.file_count(); ++k) {
      std::string bytes(static_cast<size_t>(rng() % 3001), '\0');
      for (char& c : bytes) c = static_cast<char>(rng());
      write_file(tar.file(k).path, bytes);
      contents.push_back(bytes);
    }
    write_file(bmp.file(0).path, std::string("bmp bytes"));
    contents.push_back("bmp bytes");
    std::vector<std::string> pieces;
    stream_summary_json(summary_of({tar, bmp}), [&](const std::string& piece) { pieces.push_back(piece); });
    std::string text;
    for (const std::string& piece : pieces) text += piece;
    const nlohmann::json json = nlohmann::json::parse(text);
    // The head, then a piece per batch of at most 256 files, then the end: never every entry at once.
    CHECK(pieces.size() == 2 + static_cast<size_t>((shards + 255) / 256) + 1);
    const nlohmann::json& files = json.at("files");
    REQUIRE(files.size() == contents.size());
    for (size_t k = 0; k < files.size(); ++k) {
      CAPTURE(k);
      const bool is_tar = k < static_cast<size_t>(shards);
      CHECK(files[k].at("format") == (is_tar ? "tar" : "bmp"));
      CHECK(files[k].at("path") == normal_path(is_tar ? tar.file(k).path : bmp.file(0).path));
      CHECK(files[k].at("bytes") == contents[k].size());
      CHECK(files[k].at("xxh3") == content_digest(contents[k].data(), contents[k].size()).hex());
      CHECK(files[k].at("images") == (is_tar ? (k + 1 < static_cast<size_t>(shards) ? 2 : 1) : images));
      CHECK(files[k].at("first_image") == (is_tar ? static_cast<int64_t>(2 * k) : 0));
    }
    CHECK(json.at("formats") == nlohmann::json::array({"tar", "bmp"}));
    CHECK(json.at("outputs").at(0).at("files") == shards);
    // The pattern expands to the files, in order.
    std::vector<std::string> names;
    for (size_t k = 0; k < tar.file_count(); ++k) names.push_back(normal_path(tar.file(k).path));
    CHECK(expand(json.at("outputs").at(0).at("pattern")) == names);
  }
}

TEST_CASE("summary JSON: a file that cannot be read back is one sentence naming it") {
  TempDir dir;
  const OutputLayout npy(OutputFormat::Npy, dir.file("gone"), 3, OutputOptions());
  CHECK(contains(user_error_of([&] { summary_json(summary_of({npy})); }), "cannot read back " + dir.file("gone.npy")));
}

TEST_CASE("brace patterns: shards, mosaics and the PNG folder by index or by seed expand to their very names") {
  OutputOptions options;
  options.shard_images = 10;
  options.mosaic_tiles = 2;
  for (const int64_t n : {1, 9, 11, 95, 2000001}) {
    CAPTURE(n);
    for (OutputFormat format : {OutputFormat::Tar, OutputFormat::Npy, OutputFormat::Bmp, OutputFormat::MosaicPng}) {
      const OutputLayout layout(format, "out/r", n, options);
      if (layout.file_count() > 5000) continue;
      std::vector<std::string> names;
      for (size_t k = 0; k < layout.file_count(); ++k) {
        if (layout.file(k).kind != OutputFile::Kind::Pixels) names.push_back(layout.file(k).path);
      }
      CAPTURE(format_name(format));
      CHECK(expand(files_pattern(layout, nullptr)) == names);
    }
    if (n > 100000) continue;
    const OutputLayout png(OutputFormat::Png, "out/r", n, options);
    std::vector<std::string> names;
    for (int64_t k = 0; k < n; ++k) names.push_back("out/r/" + png_file_name(k, n, SampleFacts()));
    CHECK(expand(files_pattern(png, nullptr)) == names);
  }
  // By seed: a range across the 4-digit minimum and each power of 10, single seeds, the top of uint64.
  for (const std::string list : {"0-7,42", "9990-10010,5", "99998-100001", "3", "18446744073709551610-18446744073709551615"}) {
    CAPTURE(list);
    const auto seeds = std::make_shared<const SeedList>(SeedList::parse(list));
    OutputOptions by_seed;
    by_seed.facts.named_by_seed = true;
    by_seed.facts.image_seed = [seeds](int64_t k) { return seeds->seed_at(k); };
    const OutputLayout png(OutputFormat::Png, "out/r", seeds->count(), by_seed);
    std::vector<std::string> names;
    for (int64_t k = 0; k < seeds->count(); ++k) names.push_back("out/r/" + png_file_name(k, seeds->count(), by_seed.facts));
    CHECK(expand(files_pattern(png, seeds.get())) == names);
  }
  // In subfolders, by index and by seed: a list of each subfolder's names, whose seeds' ranges cross
  // the subfolders' edges.
  for (const std::string list : {"", "0-2500", "5,9990-10010,11-1010,7", "18446744073709551610-18446744073709551615"}) {
    for (const int64_t n : {1, 999, 1000, 1001, 2501}) {
      CAPTURE(list);
      CAPTURE(n);
      OutputOptions in_subfolders;
      in_subfolders.png_layout = PngLayout::Subfolders;
      std::shared_ptr<const SeedList> seeds;
      if (!list.empty()) {
        seeds = std::make_shared<const SeedList>(SeedList::parse(list));
        if (seeds->count() < n) continue;
        in_subfolders.facts.named_by_seed = true;
        in_subfolders.facts.image_seed = [seeds](int64_t k) { return seeds->seed_at(k); };
      }
      const OutputLayout png(OutputFormat::Png, "out/r", n, in_subfolders);
      std::vector<std::string> names;
      for (int64_t k = 0; k < n; ++k) names.push_back("out/r/" + png_relative_path(k, n, PngLayout::Subfolders, in_subfolders.facts));
      CHECK(expand(files_pattern(png, seeds.get())) == names);
    }
  }
  CHECK(files_pattern(OutputLayout(OutputFormat::Tar, "r", 25, options), nullptr) == "r-{000000..000002}.tar");
  CHECK(brace_range("a/r-0001.bmp", "a/r-0010.bmp") == "a/r-{0001..0010}.bmp");
  CHECK(brace_range("seed9990.png", "seed9999.png") == "seed{9990..9999}.png");
  CHECK(brace_range("x.npy", "x.npy") == "x.npy");
}

TEST_CASE("failure JSON: the error, its status, the prefix and formats, and that no output was put in place") {
  TempDir dir;
  RunFailure failure{1, "model file m.bin has 3 bytes, expected \"20,549,132\"", dir.file("r"),
                     {OutputFormat::Tar, OutputFormat::Png}, false, false};
  nlohmann::json json = nlohmann::json::parse(failure_json(failure));
  CHECK(json.at("ok") == false);
  CHECK(json.at("error").at("message") == failure.message);
  CHECK(json.at("error").at("exit_status") == 1);
  CHECK(json.at("formats") == nlohmann::json::array({"tar", "png"}));
  CHECK(json.at("output_prefix") == normal_path(dir.file("r")));
  CHECK(json.at("left").at("outputs_in_place") == false);
  CHECK(json.at("left").at("resume").is_null());
  failure.exit_code = 3;
  failure.outputs_in_place = true;
  json = nlohmann::json::parse(failure_json(failure));
  CHECK(json.at("error").at("exit_status") == 3);
  CHECK(json.at("left").at("outputs_in_place") == true);
}
