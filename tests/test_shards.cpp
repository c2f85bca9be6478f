// test_shards.cpp: the sharded outputs (tar, npy and npy-u8 with shard_images) through the
// single-process driver: tar read back by a reader written here from the POSIX ustar spec (header
// checksum, octal sizes, padding, the two zero blocks), WebDataset's member names and order, PNGs
// decoding to channel_to_byte of the floats, npy-u8's bytes, shard boundaries at odd sizes, and the
// same bytes for every writer thread count and chunk size.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <stb_image.h>

#include "commit/existing_outputs.hpp"
#include "common/model_shape.hpp"
#include "engine/image_sink.hpp"
#include "engine/piece_plan.hpp"
#include "formats/output_format.hpp"
#include "formats/tar_shard.hpp"
#include "run/pipeline.hpp"
#include "tests/test_support.hpp"

using namespace facegen;
using namespace facegen_test;

namespace {

// (n, 64, 64, nc) seeded values, a few beyond (-1, 1) so that clamping is exercised.
std::vector<float> seeded_images(int64_t n, int nc, uint64_t seed) {
  std::vector<float> images(static_cast<size_t>(n) * 4096 * nc);
  for (float& v : images) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    v = -1.05f + 2.1f * static_cast<float>(seed >> 40) * 0x1.0p-24f;
  }
  return images;
}

struct Member {
  std::string name;
  std::string data;
};

uint64_t octal_field(const std::string& block, size_t at, size_t width) {
  uint64_t value = 0;
  size_t i = at;
  while (i < at + width && block[i] == ' ') ++i;
  for (; i < at + width && block[i] >= '0' && block[i] <= '7'; ++i) value = value * 8 + static_cast<uint64_t>(block[i] - '0');
  return value;
}

// A POSIX ustar archive's regular-file members; fails the test on anything the spec (or our fixed
// fields) does not allow.
std::vector<Member> read_ustar(const std::string& archive) {
  std::vector<Member> members;
  REQUIRE(archive.size() % 512 == 0);
  size_t at = 0;
  for (;;) {
    REQUIRE(at + 512 <= archive.size());
    const std::string header = archive.substr(at, 512);
    if (header.find_first_not_of('\0') == std::string::npos) {
      // The end: two zero blocks, and nothing after them.
      REQUIRE(at + 1024 == archive.size());
      CHECK(archive.substr(at + 512).find_first_not_of('\0') == std::string::npos);
      return members;
    }
    uint32_t sum = 0;
    for (size_t i = 0; i < 512; ++i) sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(header[i]);
    CHECK(octal_field(header, 148, 8) == sum);
    CHECK(header.compare(257, 6, std::string("ustar\0", 6)) == 0);
    CHECK(header.compare(263, 2, "00") == 0);
    CHECK(header[156] == '0');
    CHECK(octal_field(header, 100, 8) == 0644);
    CHECK(octal_field(header, 108, 8) == 0);      // uid
    CHECK(octal_field(header, 116, 8) == 0);      // gid
    CHECK(octal_field(header, 136, 12) == 0);     // mtime
    CHECK(header[265] == '\0');                   // no user name
    CHECK(header[297] == '\0');                   // no group name
    const size_t size = static_cast<size_t>(octal_field(header, 124, 12));
    Member member{header.substr(0, std::min<size_t>(100, header.find('\0'))), archive.substr(at + 512, size)};
    REQUIRE(member.data.size() == size);
    const size_t padded = (size + 511) / 512 * 512;
    CHECK(archive.substr(at + 512 + size, padded - size).find_first_not_of('\0') == std::string::npos);
    members.push_back(member);
    at += 512 + padded;
  }
}

struct Written {
  std::map<std::string, std::string> files;  // name in the folder -> bytes
};

// Writes `format` for `images` (n, 64, 64, nc) in runs of `chunk` on `threads` threads; returns
// every file the output put in place.
// The facts of the runs below: a model name that needs escaping, drawn latents of seed 7.
SampleFacts test_facts() {
  SampleFacts facts;
  facts.model = "net \"1\".bin";
  facts.model_xxh3 = "0123456789abcdef0123456789abcdef";
  facts.precision = "fp32";
  facts.random = true;
  facts.random_seed = 7;
  return facts;
}

Written write_output(OutputFormat format, const std::vector<float>& images, int64_t n, int nc, int64_t shard_images,
                     int threads, int64_t chunk, const SampleFacts& facts = test_facts()) {
  TempDir dir;
  SinkOptions options;
  options.threads = threads;
  options.image_channels = nc;
  options.shard_images = shard_images;
  options.facts = facts;
  auto sink = make_sink(format, dir.file("r"), n, options);
  for (int64_t first = 0; first < n; first += chunk) {
    sink->append(images.data() + first * 4096 * nc, first, std::min(chunk, n - first));
  }
  sink->commit();
  Written written;
  for (const std::string& name : dir.names()) {
    if (!std::filesystem::is_directory(dir.file(name))) {
      written.files[name] = read_file(dir.file(name));
      continue;
    }
    for (const auto& entry : std::filesystem::directory_iterator(dir.file(name))) {  // the png folder
      written.files[name + "/" + entry.path().filename().string()] = read_file(entry.path().string());
    }
  }
  return written;
}

std::string shard_name(int64_t k, const char* extension) {
  char name[64];
  std::snprintf(name, sizeof name, "r-%06lld.%s", static_cast<long long>(k), extension);
  return name;
}

// The 8-bit RGB pixels of image i, written from the definition: channel_to_byte, grey repeated.
std::vector<unsigned char> expected_rgb(const std::vector<float>& images, int nc, int64_t i) {
  std::vector<unsigned char> rgb(4096 * 3);
  for (int p = 0; p < 4096; ++p)
    for (int c = 0; c < 3; ++c) rgb[p * 3 + c] = channel_to_byte(images[(i * 4096 + p) * nc + (nc == 1 ? 0 : c)]);
  return rgb;
}

// Checks a tar output of n images in shards of s: the shards, their samples in index order, each
// PNG's pixels and each json.
void check_tar(const Written& written, const std::vector<float>& images, int64_t n, int nc, int64_t s) {
  const int64_t shards = std::max<int64_t>(1, (n + s - 1) / s);
  REQUIRE(written.files.size() == static_cast<size_t>(shards));
  for (int64_t k = 0; k < shards; ++k) {
    CAPTURE(k);
    REQUIRE(written.files.count(shard_name(k, "tar")) == 1);
    const std::vector<Member> members = read_ustar(written.files.at(shard_name(k, "tar")));
    const int64_t first = k * s, count = std::min(s, n - first);
    REQUIRE(members.size() == static_cast<size_t>(2 * count));
    for (int64_t i = first; i < first + count; ++i) {
      char key[16];
      std::snprintf(key, sizeof key, "%09lld", static_cast<long long>(i));
      const Member& png = members[static_cast<size_t>(2 * (i - first))];
      const Member& json = members[static_cast<size_t>(2 * (i - first) + 1)];
      CHECK(png.name == std::string(key) + ".png");
      CHECK(json.name == std::string(key) + ".json");
      int w = 0, h = 0, channels = 0;
      unsigned char* pixels = stbi_load_from_memory(reinterpret_cast<const unsigned char*>(png.data.data()),
                                                    static_cast<int>(png.data.size()), &w, &h, &channels, 3);
      REQUIRE(pixels != nullptr);
      CHECK((w == 64 && h == 64 && channels == 3));
      CHECK(std::memcmp(pixels, expected_rgb(images, nc, i).data(), 4096 * 3) == 0);
      stbi_image_free(pixels);
      CHECK(json.data == "{\"index\": " + std::to_string(i) +
                             ", \"random_seed\": 7, \"model\": \"net \\\"1\\\".bin\", \"model_xxh3\": "
                             "\"0123456789abcdef0123456789abcdef\", \"precision\": \"fp32\"}\n");
    }
  }
}

// Checks an npy (float32) or npy-u8 output: one file, or shards of s, each a whole array.
void check_npy(const Written& written, OutputFormat format, const std::vector<float>& images, int64_t n, int nc,
               int64_t s) {
  const bool u8 = format == OutputFormat::NpyU8;
  const char* extension = u8 ? "u8.npy" : "npy";
  const int64_t files = s == 0 ? 1 : std::max<int64_t>(1, (n + s - 1) / s);
  REQUIRE(written.files.size() == static_cast<size_t>(files));
  for (int64_t k = 0; k < files; ++k) {
    CAPTURE(k);
    const std::string name = s == 0 ? std::string("r.") + extension : shard_name(k, extension);
    REQUIRE(written.files.count(name) == 1);
    const std::string& bytes = written.files.at(name);
    const int64_t first = k * s, count = s == 0 ? n : std::min(s, n - first);
    const std::string header = u8 ? npy_u8_header(count, 64) : npy_header(count, nc, 64);
    CHECK(header.find(u8 ? "'descr': '|u1'" : "'descr': '<f4'") != std::string::npos);
    CHECK(header.find("'shape': (" + std::to_string(count) + ", 64, 64, " + std::to_string(u8 ? 3 : nc) + ")") !=
          std::string::npos);
    REQUIRE(bytes.compare(0, header.size(), header) == 0);
    std::string data;
    for (int64_t i = first; i < first + count; ++i) {
      if (u8) {
        const std::vector<unsigned char> rgb = expected_rgb(images, nc, i);
        data.append(reinterpret_cast<const char*>(rgb.data()), rgb.size());
      } else {
        data.append(reinterpret_cast<const char*>(images.data() + i * 4096 * nc), 4096 * nc * sizeof(float));
      }
    }
    CHECK(bytes.size() == header.size() + data.size());
    CHECK(bytes.compare(header.size(), std::string::npos, data) == 0);
  }
}

}  // namespace

TEST_CASE("tar shards: ustar members, WebDataset order, PNG pixels and json, at odd shard boundaries") {
  for (const auto& [n, s] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {5, 5}, {6, 5}, {14, 5}, {3, 10000}}) {
    for (int nc : {3, 1}) {
      CAPTURE(n);
      CAPTURE(s);
      CAPTURE(nc);
      const std::vector<float> images = seeded_images(n, nc, static_cast<uint64_t>(n * 31 + s + nc));
      check_tar(write_output(OutputFormat::Tar, images, n, nc, s == 10000 ? 0 : s, 3, 4), images, n, nc, s);
    }
  }
}

TEST_CASE("named by seed: the png folder's files and the tar samples' keys are seedNNNN, in the run's order") {
  // Seeds of every width around the 4-digit minimum, out of order, one past 2^63.
  const std::vector<uint64_t> seeds = {42, 7, 0, 9999, 10000, 123456, 18446744073709551615ull};
  const std::vector<std::string> keys = {"seed0042", "seed0007", "seed0000", "seed9999", "seed10000", "seed123456",
                                         "seed18446744073709551615"};
  const int64_t n = static_cast<int64_t>(seeds.size());
  SampleFacts facts = test_facts();
  facts.random = false;
  facts.image_seed = [seeds](int64_t index) { return seeds.at(static_cast<size_t>(index)); };
  facts.named_by_seed = true;
  const std::vector<float> images = seeded_images(n, 3, 5);
  const Written png = write_output(OutputFormat::Png, images, n, 3, 0, 2, 3, facts);
  const Written tar = write_output(OutputFormat::Tar, images, n, 3, 3, 2, 3, facts);
  const Written by_index = write_output(OutputFormat::Png, images, n, 3, 0, 2, 3);
  REQUIRE(tar.files.size() == 3);
  std::vector<Member> members;
  for (const auto& [name, bytes] : tar.files) {
    for (const Member& member : read_ustar(bytes)) members.push_back(member);
  }
  REQUIRE(members.size() == static_cast<size_t>(2 * n));
  for (int64_t i = 0; i < n; ++i) {
    CAPTURE(i);
    const std::string& key = keys[static_cast<size_t>(i)];
    CHECK(png_file_name(i, n, facts) == key + ".png");
    CHECK(sample_key(i, facts) == key);
    CHECK(members[static_cast<size_t>(2 * i)].name == key + ".png");
    CHECK(members[static_cast<size_t>(2 * i + 1)].name == key + ".json");
    CHECK(contains(members[static_cast<size_t>(2 * i + 1)].data,
                   "\"index\": " + std::to_string(i) + ", \"seed\": " + std::to_string(seeds[static_cast<size_t>(i)])));
    // The same PNG bytes as the run that names its files by index.
    CHECK(members[static_cast<size_t>(2 * i)].data == by_index.files.at("r/" + png_file_name(i, n, SampleFacts())));
  }
  CHECK(is_png_file_name(keys.back() + ".png"));
}

TEST_CASE("tar frames: TarFrameMaker makes tar_sample_frame's bytes, for every kind of run and index") {
  // Runs: drawn from a seed (with and without --truncation), a seed per image (named by index or by
  // seed), latents from a file; models named and not, with characters JSON escapes; PNGs of several
  // sizes. Indices at every key width, past a billion, and random ones; the buffer poisoned, and the
  // bytes past the frame left as they were.
  const uint64_t seed = std::random_device{}();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::vector<SampleFacts> runs;
  SampleFacts drawn = test_facts();
  runs.push_back(drawn);
  drawn.truncation = 0.7;
  runs.push_back(drawn);
  SampleFacts seeded = test_facts();
  seeded.random = false;
  seeded.image_seed = [](int64_t index) { return static_cast<uint64_t>(index) * 2654435761ull % 100003 * (index % 7 == 6 ? 184467440737095ull : 1); };
  runs.push_back(seeded);
  seeded.named_by_seed = true;
  seeded.truncation = 1.25;
  runs.push_back(seeded);
  seeded.image_seed = [](int64_t index) { return index % 2 ? 18446744073709551615ull : static_cast<uint64_t>(index % 10); };
  runs.push_back(seeded);
  SampleFacts from_file;
  from_file.precision = "tf32";
  runs.push_back(from_file);
  from_file.model = "my \"odd\" \\ model\n\x01.safetensors";
  from_file.model_xxh3 = "00ff";
  runs.push_back(from_file);
  std::vector<int64_t> indices = {0, 1, 9, 10, 99, 100, 99999999, 100000000, 999999999, 1000000000, 123456789012345};
  for (int k = 0; k < 40; ++k) indices.push_back(static_cast<int64_t>(rng() % 5000000000ull));
  for (size_t r = 0; r < runs.size(); ++r) {
    for (int64_t png_bytes : {int64_t{12420}, int64_t{0}, int64_t{511}, int64_t{512}, int64_t{49213}}) {
      const TarFrameMaker frames(png_bytes, runs[r]);
      TarSampleFrame frame;
      for (const int64_t index : indices) {
        CAPTURE(r);
        CAPTURE(png_bytes);
        CAPTURE(index);
        tar_sample_frame(index, png_bytes, runs[r], frame);
        const std::string expected = frame.png_header + frame.json_member;
        std::vector<char> meta(expected.size() + 64, static_cast<char>(0xa5));
        const int64_t member = frames.make(index, meta.data(), static_cast<int64_t>(expected.size()));
        CHECK(member == static_cast<int64_t>(frame.json_member.size()));
        CHECK(std::string(meta.data(), expected.size()) == expected);
        CHECK(std::all_of(meta.begin() + static_cast<std::ptrdiff_t>(expected.size()), meta.end(),
                          [](char c) { return c == static_cast<char>(0xa5); }));
        CHECK_THROWS_AS(frames.make(index, meta.data(), static_cast<int64_t>(expected.size()) - 1), std::logic_error);
      }
    }
  }
}

TEST_CASE("tar shards: a PNG member holds the png format's bytes") {
  const int64_t n = 4;
  const std::vector<float> images = seeded_images(n, 3, 11);
  TempDir dir;
  auto sink = make_sink(OutputFormat::Png, dir.file("r"), n, SinkOptions{});
  sink->append(images.data(), 0, n);
  sink->commit();
  const std::vector<Member> members = read_ustar(write_output(OutputFormat::Tar, images, n, 3, 0, 2, n).files.at("r-000000.tar"));
  for (int64_t i = 0; i < n; ++i) CHECK(members[static_cast<size_t>(2 * i)].data == read_file(dir.file("r/" + png_file_name(i, n, SampleFacts()))));
}

TEST_CASE("npy and npy-u8: channel_to_byte of the floats, grey repeated, one file or shards at odd boundaries") {
  for (OutputFormat format : {OutputFormat::Npy, OutputFormat::NpyU8}) {
    for (const auto& [n, s] : std::vector<std::pair<int64_t, int64_t>>{{1, 0}, {7, 0}, {1, 1}, {5, 5}, {6, 5}, {14, 5}}) {
      for (int nc : {3, 1}) {
        CAPTURE(format_name(format));
        CAPTURE(n);
        CAPTURE(s);
        CAPTURE(nc);
        const std::vector<float> images = seeded_images(n, nc, static_cast<uint64_t>(n * 7 + s + nc));
        check_npy(write_output(format, images, n, nc, s, 3, 4), format, images, n, nc, s);
      }
    }
  }
}

TEST_CASE("npy-u8: a run longer than one conversion buffer, one thread") {
  const int64_t n = 600;  // more than the 256 images converted per write
  const std::vector<float> images = seeded_images(n, 3, 9);
  check_npy(write_output(OutputFormat::NpyU8, images, n, 3, 0, 1, n), OutputFormat::NpyU8, images, n, 3, 0);
  check_npy(write_output(OutputFormat::NpyU8, images, n, 3, 257, 1, n), OutputFormat::NpyU8, images, n, 3, 257);
}

TEST_CASE("shards: the same bytes for 1, 2, 3 and 7 writer threads and any chunk size") {
  const int64_t n = 23;
  const std::vector<float> images = seeded_images(n, 3, 5);
  for (OutputFormat format : {OutputFormat::Tar, OutputFormat::Npy, OutputFormat::NpyU8, OutputFormat::Text}) {
    const int64_t s = format == OutputFormat::Text ? 0 : 4;
    const Written reference = write_output(format, images, n, 3, s, 1, n);
    for (int threads : {1, 2, 3, 7}) {
      for (int64_t chunk : {int64_t{1}, int64_t{3}, int64_t{5}, int64_t{9}, n}) {
        CAPTURE(format_name(format));
        CAPTURE(threads);
        CAPTURE(chunk);
        CHECK(write_output(format, images, n, 3, s, threads, chunk).files == reference.files);
      }
    }
  }
}

TEST_CASE("shards: names, --shard-images bounds, and an empty job's archive") {
  OutputOptions options;
  options.shard_images = 3;
  const OutputLayout tar(OutputFormat::Tar, "out/r", 7, options);
  CHECK(tar.file_count() == 3);
  CHECK(tar.file(2).path == "out/r-000002.tar");
  CHECK((tar.file(2).first == 6 && tar.file(2).count == 1));
  CHECK(tar.writes_name("r-000001.tar"));
  CHECK_FALSE(tar.writes_name("r-000003.tar"));
  CHECK_FALSE(tar.writes_name("r-00001.tar"));
  CHECK(is_output_name(OutputFormat::Tar, "r", "r-000009.tar"));
  CHECK_FALSE(is_output_name(OutputFormat::Tar, "r", "r.tar"));
  CHECK(is_output_name(OutputFormat::NpyU8, "r", "r.u8.npy"));
  CHECK(is_output_name(OutputFormat::NpyU8, "r", "r-000000.u8.npy"));
  CHECK_FALSE(is_output_name(OutputFormat::Npy, "r", "r.u8.npy"));
  CHECK_FALSE(is_output_name(OutputFormat::Npy, "r", "r-000000.u8.npy"));
  CHECK(shard_path("r", "tar", 5, 2000000) == "r-0000005.tar");
  CHECK(sample_key(1234567890, SampleFacts()) == "1234567890");
  options.shard_images = int64_t{1} << 31;
  CHECK(contains(user_error_of([&] { OutputLayout(OutputFormat::Npy, "r", 7, options); }), "--shard-images"));
  // No image: one shard that is an archive with no member.
  const std::vector<float> none;
  CHECK(read_ustar(write_output(OutputFormat::Tar, none, 0, 3, 0, 2, 1).files.at("r-000000.tar")).empty());
}

TEST_CASE("job flow: units are the files of the outputs of many files; txt or a pipe keeps image order") {
  OutputOptions options;
  CHECK(unit_images_for({OutputFormat::Text, OutputFormat::Npy}, options, 100000) == 0);  // one file each
  CHECK(unit_images_for({OutputFormat::Tar}, options, 100000) == kDefaultShardImages);
  CHECK(unit_images_for({OutputFormat::Png, OutputFormat::NpyU8}, options, 100000) == 0);  // npy-u8 unsplit
  options.shard_images = 700;
  CHECK(unit_images_for({OutputFormat::Png, OutputFormat::NpyU8}, options, 100000) == 700);
  CHECK(unit_images_for({OutputFormat::Bmp, OutputFormat::Tar}, options, 100000) == 700);
  options.shard_images = 0;
  options.mosaic_tiles = 4;
  CHECK(unit_images_for({OutputFormat::Bmp}, options, 16) == 0);   // one mosaic file
  CHECK(unit_images_for({OutputFormat::Bmp}, options, 17) == 16);  // split: a file of 16 tiles each
  CHECK(unit_images_for({OutputFormat::MosaicPng}, options, 40) == 16);
  CHECK(needs_image_order({OutputFormat::Text, OutputFormat::Bmp}, true));
  CHECK(needs_image_order({OutputFormat::Tar}, false));
  CHECK_FALSE(needs_image_order({OutputFormat::Tar, OutputFormat::Png}, true));

  // Lanes: half the threads, at most the units; one where order is needed. Buffers: two a lane and
  // two more, at least 4, within the bytes in flight.
  const JobFlow tar = job_flow({OutputFormat::Tar}, OutputOptions{}, 1000000, 16, rgb8_image_bytes(64), 0, false);
  CHECK(tar.unit_images == kDefaultShardImages);
  CHECK(tar.piece_images == kDefaultPieceBytes / rgb8_image_bytes(64));
  CHECK(tar.lanes == 8);
  CHECK(tar.buffers == 18);
  CHECK(job_flow({OutputFormat::Tar}, OutputOptions{}, 25000, 16, rgb8_image_bytes(64), 0, false).lanes == 3);
  const JobFlow text = job_flow({OutputFormat::Text}, OutputOptions{}, 100, 16, 49152, 0, true);
  CHECK(text.lanes == 1);
  CHECK(text.buffers == 4);
  CHECK(text.piece_images == 100);  // never more than N
  CHECK(job_flow({OutputFormat::Npy}, OutputOptions{}, 100000, 64, 49152, 64, false).piece_images == 64);  // --chunk
  const JobFlow wide = job_flow({OutputFormat::Tar}, OutputOptions{}, int64_t{1} << 30, 256, 49152, 8192, false);
  CHECK(wide.buffers * wide.piece_images * 49152 <= std::max<int64_t>(kMaxInFlightBytes, 4 * 8192 * 49152));
}

TEST_CASE("piece plan: every image once, pieces inside units, lanes in turn, each unit in order") {
  for (int64_t total : {0, 1, 7, 100, 1001}) {
    for (int64_t unit : {0, 1, 10, 333}) {
      for (int64_t piece : {1, 3, 64}) {
        for (int lanes : {1, 2, 5}) {
          PiecePlan plan(total, unit, piece, lanes);
          std::vector<int> seen(static_cast<size_t>(total), 0);
          std::vector<int64_t> unit_next(static_cast<size_t>(plan.units()), -1);
          PieceRange p;
          int64_t pieces = 0;
          bool good = true;
          while (plan.next(p)) {
            ++pieces;
            const int64_t u = p.first / plan.unit_images();
            good &= p.count >= 1 && p.count <= piece && (p.first + p.count - 1) / plan.unit_images() == u;
            // Within a unit, in image order with no gap.
            const int64_t expected = unit_next[static_cast<size_t>(u)] < 0 ? plan.unit(u).first : unit_next[static_cast<size_t>(u)];
            good &= p.first == expected;
            unit_next[static_cast<size_t>(u)] = p.first + p.count;
            for (int64_t i = p.first; i < p.first + p.count; ++i) ++seen[static_cast<size_t>(i)];
          }
          INFO("N " << total << ", unit " << unit << ", piece " << piece << ", lanes " << lanes);
          CHECK(good);
          CHECK(std::count(seen.begin(), seen.end(), 1) == total);
          CHECK(plan.images() == total);
          if (lanes == 1) CHECK(pieces == (total == 0 ? 0 : pieces));
        }
      }
    }
  }
  // Two lanes alternate between two units: 0-9 and 10-19 in pieces of 5.
  PiecePlan plan(20, 10, 5, 2);
  std::vector<int64_t> firsts;
  for (PieceRange p; plan.next(p);) firsts.push_back(p.first);
  CHECK(firsts == std::vector<int64_t>{0, 10, 5, 15});
  // An MPI rank's share: images 10-29, units 1 and 2 of 4.
  PiecePlan share(40, 10, 10, 1, 10, 30);
  firsts.clear();
  for (PieceRange p; share.next(p);) firsts.push_back(p.first);
  CHECK(firsts == std::vector<int64_t>{10, 20});
  CHECK(share.images() == 20);
  // A share of a job whose unit is all of N (a folder of PNGs): its own images alone, in pieces of 5.
  PiecePlan png_share(40, 0, 5, 4, 13, 29);
  std::vector<int64_t> counts;
  firsts.clear();
  for (PieceRange p; png_share.next(p);) {
    firsts.push_back(p.first);
    counts.push_back(p.count);
  }
  CHECK(firsts == std::vector<int64_t>{13, 18, 23, 28});
  CHECK(counts == std::vector<int64_t>{5, 5, 5, 1});
  CHECK(png_share.images() == 16);
}
