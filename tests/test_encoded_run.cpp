// test_encoded_run.cpp: runs that come already in their output's bytes (formats/encoded_run.hpp) are
// planned from the format's own definitions: filled in by the encoders' CPU model (the GPU's kernels
// are held to the same bytes in tests/gpu/test_encode_gpu.cu), they give byte for byte the files that
// the formats' own encoders write from the pixels: level-0 PNGs of every size (one stored block and
// several), png folders, tar shards (shard edges, seeds, json that needs escapes), bmp and mosaic-png
// (square, columns, padding, split mosaics), whole or cut into runs anywhere, into poisoned memory,
// and through the output engine's ring beside an output that takes the pixels (npy-u8);
// and the GPU kernel's checksum arithmetic (kernels/checksum_parts.hpp) against libdeflate's.
#include <doctest/doctest.h>
#include <libdeflate.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/image_sink.hpp"
#include "engine/output_engine.hpp"
#include "formats/encoded_run.hpp"
#include "formats/memory_output.hpp"
#include "formats/output_format.hpp"
#include "kernels/checksum_parts.hpp"
#include "tests/random_bytes.hpp"
#include "tests/test_support.hpp"

using namespace facegen;
using namespace facegen_test;

namespace {

constexpr unsigned char kPoison = 0xa5;

std::vector<unsigned char> random_pixels(int64_t bytes, uint64_t seed) {
  return random_bytes<std::vector<unsigned char>>(static_cast<size_t>(bytes), seed);
}

// The memory of one encoded run, poisoned.
struct RunMemory {
  std::vector<unsigned char> bytes, plan;
  explicit RunMemory(EncodedCapacity capacity)
      : bytes(static_cast<size_t>(capacity.bytes), kPoison), plan(static_cast<size_t>(capacity.plan_bytes), kPoison) {}
  EncodedMemory memory() {
    return {bytes.data(), static_cast<int64_t>(bytes.size()), plan.data(), static_cast<int64_t>(plan.size())};
  }
};

// Images [first, first + count) of `layout` encoded from their pixels (count, S, S, 3).
struct EncodedImages {
  RunMemory memory;
  EncodedRun run;
  int size;  // S
  EncodedImages(const OutputLayout& layout, int64_t first, int64_t count, const unsigned char* pixels, int threads)
      : memory(layout.encoded_capacity(std::max<int64_t>(count, 1))), size(layout.image_size()) {
    layout.plan_encoded_run(first, count, memory.memory(), run, threads);
    encode_run_on_host(run, pixels, threads);
  }
  ImageRun images() const {  // no pixels: the writers must take the encoded bytes
    ImageRun only{ImageEncoding::Rgb8, nullptr, 3, size};
    only.encoded = &run;
    return only;
  }
};

struct Case {
  std::string name;
  OutputFormat format;
  OutputOptions options;
};

SampleFacts seeded_facts() {
  SampleFacts facts;
  facts.model = "models/a \"quoted\"\\name.bin";
  facts.precision = "bf16";
  facts.image_seed = [](int64_t index) { return static_cast<uint64_t>(index) * 0x9e3779b97f4a7c15ull; };
  return facts;
}

// --seeds: each image named by its seed (no seed twice), and a model known by its digest.
SampleFacts seed_named_facts() {
  SampleFacts facts = seeded_facts();
  facts.model_xxh3 = "0123456789abcdef0123456789abcdef";
  facts.named_by_seed = true;
  return facts;
}

// The cases for images of size x size pixels (padding up to a quarter of a tile: encoded runs).
std::vector<Case> cases(int size) {
  std::vector<Case> all;
  OutputOptions plain;
  plain.image_size = size;
  all.push_back({"png", OutputFormat::Png, plain});
  all.push_back({"tar", OutputFormat::Tar, plain});
  OutputOptions shards = plain;
  shards.shard_images = 5;
  shards.facts = seeded_facts();
  all.push_back({"tar in shards of 5, seeds", OutputFormat::Tar, shards});
  OutputOptions ones = plain;
  ones.shard_images = 1;
  ones.facts.random = true;
  ones.facts.random_seed = 18446744073709551615ull;
  ones.facts.precision = "fp32";
  all.push_back({"tar in shards of 1, random", OutputFormat::Tar, ones});
  OutputOptions by_seed = plain;
  by_seed.facts = seed_named_facts();
  all.push_back({"png named by seed", OutputFormat::Png, by_seed});
  all.push_back({"tar named by seed", OutputFormat::Tar, by_seed});
  OutputOptions subfolders_by_seed = by_seed;
  subfolders_by_seed.png_layout = PngLayout::Subfolders;
  all.push_back({"png in subfolders, named by seed", OutputFormat::Png, subfolders_by_seed});
  all.push_back({"bmp", OutputFormat::Bmp, plain});
  all.push_back({"mosaic-png", OutputFormat::MosaicPng, plain});
  OutputOptions grid = plain;
  grid.grid_columns = 7;
  grid.grid_padding = 2;
  all.push_back({"bmp, 7 columns, padding 2", OutputFormat::Bmp, grid});
  all.push_back({"mosaic-png, 7 columns, padding 2", OutputFormat::MosaicPng, grid});
  OutputOptions split = plain;
  split.mosaic_tiles = 4;
  split.grid_padding = size / 4;
  const std::string padded = "split at 16 tiles, padding " + std::to_string(split.grid_padding);
  all.push_back({"bmp " + padded, OutputFormat::Bmp, split});
  all.push_back({"mosaic-png " + padded, OutputFormat::MosaicPng, split});
  for (Case& c : all) c.name += ", " + std::to_string(size) + "x" + std::to_string(size);
  return all;
}

}  // namespace

TEST_CASE("encoded runs: a level-0 PNG filled into its template is the encoder's, for every size") {
  // 64 and its halves and doubles; odd sizes; two stored blocks (120 rows of 601 bytes); a row of
  // 65,536 raw bytes, which crosses a block's end.
  const std::vector<std::pair<int, int>> sizes = {{64, 64}, {32, 32}, {128, 128}, {1, 1},    {3, 5},
                                                  {5, 3},   {200, 120}, {21845, 1}, {7, 127}};
  for (const auto& [width, height] : sizes) {
    CAPTURE(width);
    CAPTURE(height);
    for (int64_t count : {1, 3}) {
      const int64_t image_bytes = int64_t{width} * height * 3;
      const std::vector<unsigned char> pixels = random_pixels(count * image_bytes, width * 1000003u + height + count);
      RunMemory memory(png_records_capacity(count, width, height));
      EncodedRun run;
      plan_png_records(count, width, height, memory.memory(), run);
      encode_run_on_host(run, pixels.data(), 2);
      REQUIRE(run.count == count);
      PngEncoder encoder(0);
      std::string png;
      for (int64_t i = 0; i < count; ++i) {
        encoder.encode(pixels.data() + i * image_bytes, width, height, png);
        const std::string made(reinterpret_cast<const char*>(run.bytes + run.record_at[i]),
                               static_cast<size_t>(run.record_at[i + 1] - run.record_at[i]));
        CHECK(made == png);
      }
      CHECK(run.used == count * static_cast<int64_t>(png.size()));
    }
  }
}

TEST_CASE("encoded runs: the stored layout names the encoder's own bytes") {
  const PngStoredLayout& layout = png_stored_layout(64, 64);
  CHECK(&layout == &png_stored_layout(64, 64));  // made once
  CHECK(layout.raw_bytes == 64 * 193);
  CHECK(layout.bytes.compare(static_cast<size_t>(layout.crc_from), 4, "IDAT") == 0);
  CHECK(static_cast<int64_t>(layout.bytes.size()) == layout.crc_at + 4 + 12);  // then IEND
  // A row's filter byte is in the template (none, at level 0); its pixel bytes follow it.
  CHECK(layout.bytes[static_cast<size_t>(layout.raw_at(193))] == '\0');
  CHECK(layout.raw_at(194) == layout.raw_at(193) + 1);
  CHECK_THROWS_AS(png_stored_layout(0, 64), std::invalid_argument);
}

TEST_CASE("encoded runs: every format's files from encoded runs equal those written from the pixels") {
  for (const int size : kImageSizes) {
    for (const Case& c : cases(size)) {
      for (int64_t count : {1, 3, 23, 127}) {
        CAPTURE(c.name);
        CAPTURE(count);
        const OutputLayout layout(c.format, "r", count, c.options);
        REQUIRE(layout.encoded_kind() != EncodedKind::None);
        const std::vector<unsigned char> pixels = random_pixels(count * rgb8_image_bytes(size), static_cast<uint64_t>(count) * 7 + 1);
        const std::vector<std::string> want = encode_in_memory(layout, ImageRun::rgb8(pixels.data(), 3, size), 2);
        const EncodedImages encoded(layout, 0, count, pixels.data(), 3);
        const std::vector<std::string> got = encode_in_memory(layout, encoded.images(), 2);
        REQUIRE(got.size() == want.size());
        for (size_t k = 0; k < want.size(); ++k) {
          CAPTURE(k);
          CHECK(got[k] == want[k]);
        }
      }
    }
  }
}

TEST_CASE("encoded runs: a job cut into runs anywhere writes the files its pixels write") {
  std::mt19937_64 random(11);
  for (const int size : kImageSizes) {
    for (const Case& c : cases(size)) {
      for (int64_t total : {1, 3, 127}) {
        CAPTURE(std::string(c.name));
        CAPTURE(total);
        const int64_t image_bytes = rgb8_image_bytes(size);
        const std::vector<unsigned char> pixels = random_pixels(total * image_bytes, static_cast<uint64_t>(total) + 5);
        SinkOptions options;
        options.image_size = size;
        options.threads = 2;
        options.mosaic_tiles = c.options.mosaic_tiles;
        options.grid_columns = c.options.grid_columns;
        options.grid_padding = c.options.grid_padding;
        options.shard_images = c.options.shard_images;
        options.facts = c.options.facts;
        options.png_layout = c.options.png_layout;
        TempDir from_pixels, from_runs;
        auto want = make_sink(c.format, from_pixels.path + "/r", total, options);
        want->append(ImageRun::rgb8(pixels.data(), 3, size), 0, total);
        want->commit();
        auto got = make_sink(c.format, from_runs.path + "/r", total, options);
        REQUIRE(got->layout() != nullptr);
        // Runs of random lengths, each planned for its own images, across shard and mosaic edges.
        for (int64_t first = 0; first < total;) {
          const int64_t count = std::min<int64_t>(total - first, 1 + static_cast<int64_t>(random() % 40));
          const EncodedImages encoded(*got->layout(), first, count, pixels.data() + first * image_bytes, 2);
          got->append(encoded.images(), first, count);
          first += count;
        }
        got->commit();
        // The final names (a mosaic PNG's scratch pixels stay until its sink goes).
        auto finals = [](std::vector<std::string> names) {
          names.erase(std::remove_if(names.begin(), names.end(),
                                     [](const std::string& n) { return n.find(".tmp-") != std::string::npos; }),
                      names.end());
          return names;
        };
        const std::vector<std::string> names = finals(from_pixels.names());
        REQUIRE(finals(from_runs.names()) == names);
        for (const std::string& name : names) {
          CAPTURE(name);
          if (c.format == OutputFormat::Png) {
            for (int64_t i = 0; i < total; ++i) {
              const std::string file = name + "/" + png_relative_path(i, total, c.options.png_layout, c.options.facts);
              const std::string made = read_file(from_runs.file(file));
              CHECK(made.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);  // there, by that name
              CHECK(made == read_file(from_pixels.file(file)));
            }
            if (c.options.facts.named_by_seed) {  // the seed's name, in the subfolder of the image's index
              const std::string last = png_relative_path(total - 1, total, c.options.png_layout, c.options.facts);
              CHECK(last == (c.options.png_layout == PngLayout::Subfolders ? "000/" : "") +
                                seed_image_key(c.options.facts.image_seed(total - 1)) + ".png");
            }
          } else {
            CHECK(read_file(from_runs.file(name)) == read_file(from_pixels.file(name)));
          }
        }
      }
    }
  }
}

TEST_CASE("encoded runs: which outputs have them, and their plans' limits") {
  OutputOptions level1;
  level1.png_level = 1;
  CHECK(OutputLayout(OutputFormat::Png, "r", 5, level1).encoded_kind() == EncodedKind::None);
  CHECK(OutputLayout(OutputFormat::Tar, "r", 5, level1).encoded_kind() == EncodedKind::None);
  CHECK(OutputLayout(OutputFormat::MosaicPng, "r", 5, level1).encoded_kind() == EncodedKind::Parts);
  CHECK(OutputLayout(OutputFormat::NpyU8, "r", 5, {}).encoded_kind() == EncodedKind::None);
  CHECK(OutputLayout(OutputFormat::Npy, "r", 5, {}).encoded_kind() == EncodedKind::None);
  CHECK(OutputLayout(OutputFormat::Text, "r", 5, {}).encoded_kind() == EncodedKind::None);
  OutputOptions wide;
  for (const int size : kImageSizes) {  // more than a quarter of a tile: written from the pixels
    wide.image_size = size;
    wide.grid_padding = size / 4;
    CHECK(OutputLayout(OutputFormat::Bmp, "r", 5, wide).encoded_kind() == EncodedKind::Parts);
    wide.grid_padding = size / 4 + 1;
    CHECK(OutputLayout(OutputFormat::Bmp, "r", 5, wide).encoded_kind() == EncodedKind::None);
  }
  // A plan for more images than its memory was sized for is refused.
  const OutputLayout tar(OutputFormat::Tar, "r", 100, {});
  RunMemory small(tar.encoded_capacity(3));
  EncodedRun run;
  CHECK_THROWS_AS(tar.plan_encoded_run(0, 10, small.memory(), run, 1), std::logic_error);
  CHECK_THROWS_AS(tar.plan_encoded_run(95, 10, small.memory(), run, 1), std::logic_error);
  const OutputLayout bmp(OutputFormat::Bmp, "r", 100, {});
  RunMemory parts(bmp.encoded_capacity(3));
  CHECK_THROWS_AS(bmp.plan_encoded_run(0, 10, parts.memory(), run, 1), std::logic_error);
}

TEST_CASE("checksums in parts: CRC-32 and Adler-32 joined from parts equal libdeflate's of the whole") {
  // The arithmetic of the GPU's PNG kernel (kernels/checksum_parts.hpp), run here part by part.
  uint32_t table[256];
  for (uint32_t i = 0; i < 256; ++i) table[i] = checksum::crc_table_entry(i);
  for (int64_t bytes : {1, 2, 31, 255, 256, 257, 12371, 49515, 200000}) {
    for (int parts : {1, 2, 8, 256}) {
      CAPTURE(bytes);
      CAPTURE(parts);
      const std::vector<unsigned char> message = random_pixels(bytes, static_cast<uint64_t>(bytes * 31 + parts));
      const checksum::CrcParts c = checksum::crc_parts(bytes, parts);
      std::vector<uint32_t> raw(static_cast<size_t>(parts), 0);
      unsigned long long sum = 0, weighted = 0;
      for (int t = 0; t < parts; ++t) {
        const int64_t end = checksum::crc_part_end(c, bytes, parts, t);
        for (int64_t p = std::max<int64_t>(0, end - c.part_bytes); p < end; ++p) {
          raw[static_cast<size_t>(t)] = checksum::crc_update(raw[static_cast<size_t>(t)], message[static_cast<size_t>(p)], table);
        }
      }
      for (int64_t r = 0; r < bytes; ++r) {
        sum += message[static_cast<size_t>(r)];
        weighted += static_cast<unsigned long long>(bytes - r) * message[static_cast<size_t>(r)];
      }
      for (int round = 0; round < c.rounds; ++round) {
        for (int t = 0; t + (1 << round) < parts; t += 2 << round) {
          raw[static_cast<size_t>(t)] = checksum::crc_join(c, round, raw[static_cast<size_t>(t)], raw[static_cast<size_t>(t + (1 << round))]);
        }
      }
      CHECK(checksum::crc_finish(c, raw[0]) == libdeflate_crc32(0, message.data(), message.size()));
      CHECK(checksum::adler_finish(sum, weighted, static_cast<uint64_t>(bytes)) ==
            libdeflate_adler32(1, message.data(), message.size()));
    }
  }
}

TEST_CASE("encoded runs: the output engine plans each piece's runs, and its files are those of the pixels") {
  // tar, png and bmp take encoded runs; npy-u8 the pixels, which the buffers then hold too. Pieces
  // of 7 in a ring of 3 (two to a tar shard: a piece never spans a file of records, as the engine's
  // plan makes them), filled as a backend that makes encoded runs would (the CPU model).
  const int64_t total = 61;
  SinkOptions options;
  options.threads = 2;
  options.shard_images = 14;
  options.grid_columns = 9;
  for (const int size : kImageSizes) {
    CAPTURE(size);
    const int64_t image_bytes = rgb8_image_bytes(size);
    const std::vector<unsigned char> pixels = random_pixels(total * image_bytes, 61 + size);
    const std::vector<OutputFormat> formats = {OutputFormat::Tar, OutputFormat::Png, OutputFormat::Bmp, OutputFormat::NpyU8};
    options.image_size = size;
    auto write_job = [&](const std::string& folder, bool encoded) {
      std::vector<std::unique_ptr<ImageSink>> sinks;
      std::vector<ImageSink*> outputs;
      for (OutputFormat format : formats) {
        sinks.push_back(make_sink(format, folder + "/r", total, options));
        outputs.push_back(sinks.back().get());
      }
      EngineOptions engine_options;
      engine_options.piece_images = 7;
      engine_options.buffers = 3;
      engine_options.threads = 2;
      engine_options.encoding = ImageEncoding::Rgb8;
      engine_options.image_size = size;
      engine_options.encoded_runs = encoded;
      OutputEngine engine(outputs, engine_options);
      for (int64_t first = 0; first < total; first += 7) {
        const int64_t count = std::min<int64_t>(7, total - first);
        const PieceBuffer buffer = engine.acquire();
        std::memset(buffer.images, kPoison, static_cast<size_t>(count * image_bytes));
        const EncodedRuns* runs = engine.plan_encoded(buffer, first, count);
        const unsigned char* from = pixels.data() + first * image_bytes;
        REQUIRE((runs != nullptr) == encoded);
        if (runs) {
          CHECK(runs->pixels);  // npy-u8 takes them
          CHECK(runs->runs.size() == 3);
          for (const EncodedRun* run : runs->runs) encode_run_on_host(*run, from, 1);
        }
        std::memcpy(buffer.images, from, static_cast<size_t>(count * image_bytes));
        engine.submit(buffer.images, first, count);
      }
      engine.finish();
      commit_sinks(outputs);
    };
    TempDir from_pixels, from_runs;
    write_job(from_pixels.path, false);
    write_job(from_runs.path, true);
    const std::vector<std::string> names = from_pixels.names();
    REQUIRE(from_runs.names() == names);
    for (const std::string& name : names) {
      CAPTURE(name);
      if (name == "r") {
        for (int64_t i = 0; i < total; ++i) {
          const std::string file = "r/" + png_file_name(i, total, SampleFacts());
          CHECK(read_file(from_runs.file(file)) == read_file(from_pixels.file(file)));
        }
      } else {
        CHECK(read_file(from_runs.file(name)) == read_file(from_pixels.file(name)));
      }
    }
  }
  // A piece submitted for other images than those planned is a logic error.
  options.image_size = kDefaultImageSize;
  TempDir other;
  auto tar = make_sink(OutputFormat::Tar, other.path + "/r", total, options);
  EngineOptions engine_options;
  engine_options.piece_images = 7;
  engine_options.encoding = ImageEncoding::Rgb8;
  engine_options.encoded_runs = true;
  OutputEngine engine({tar.get()}, engine_options);
  const PieceBuffer buffer = engine.acquire();
  REQUIRE(engine.plan_encoded(buffer, 0, 7) != nullptr);
  CHECK(engine.plan_encoded(buffer, 0, 7)->pixels == false);  // tar alone: no pixels in the buffers
  CHECK_THROWS_AS(engine.submit(buffer.images, 7, 7), std::logic_error);
}
