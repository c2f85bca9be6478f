// test_encode_gpu.cu: the GPU's encoders (kernels/encode_images.hpp, generator/gpu_run_encoder.hpp)
// against their CPU references: the bytes of every encoded run equal those of the encoders' CPU model
// (encode_run_on_host) and, where the run is a whole output, the files the formats' own encoders
// write (PngEncoder at level 0, tar shards, bmp and mosaic-png) from the same pixels.
//
// Fresh random pixels (never zeros alone) for every check; odd counts (1, 3, 127) beside round ones;
// runs that start inside a tar shard and cross shard and mosaic edges; every target poisoned, and the
// bytes past each run checked untouched; page-locked and plain memory. Then the pipeline: a stream of
// jobs of odd sizes around its batch, each with encoded runs (and its pixels, every other job),
// gives the bytes of the CPU model on the pipeline's own pixels, its flags as without encoders.
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/cuda_check.cuh"
#include "formats/encoded_run.hpp"
#include "formats/memory_output.hpp"
#include "formats/output_format.hpp"
#include "generator/gpu_pipeline.hpp"
#include "generator/gpu_run_encoder.hpp"
#include "tests/gpu/gpu_test_support.cuh"
#include "tests/random_bytes.hpp"

namespace facegen {
namespace {

constexpr unsigned char kPoison = 0xa5;

std::vector<unsigned char> random_pixels(int64_t bytes, uint64_t seed) {
  return facegen_test::random_bytes<std::vector<unsigned char>>(static_cast<size_t>(bytes), seed);
}

// Host memory, page-locked or plain, poisoned.
struct HostBytes {
  unsigned char* p = nullptr;
  int64_t size = 0;
  bool locked = false;
  std::vector<unsigned char> plain;
  HostBytes(int64_t bytes, bool page_locked) : size(std::max<int64_t>(bytes, 1)), locked(page_locked) {
    if (locked) {
      CUDA_CHECK(cudaMallocHost(&p, static_cast<size_t>(size)));
    } else {
      plain.resize(static_cast<size_t>(size));
      p = plain.data();
    }
    std::memset(p, kPoison, static_cast<size_t>(size));
  }
  ~HostBytes() {
    if (locked) cudaFreeHost(p);
  }
  HostBytes(const HostBytes&) = delete;
  HostBytes& operator=(const HostBytes&) = delete;
};

// One run's memory (its bytes and its plan).
struct RunMemory {
  HostBytes bytes, plan;
  RunMemory(EncodedCapacity capacity, bool locked) : bytes(capacity.bytes, locked), plan(capacity.plan_bytes, locked) {}
  EncodedMemory memory() { return {bytes.p, bytes.size, plan.p, plan.size}; }
};

struct DeviceBytes {
  unsigned char* p = nullptr;
  explicit DeviceBytes(const std::vector<unsigned char>& host) {
    CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(host.size(), 1)));
    CUDA_CHECK(cudaMemcpy(p, host.data(), host.size(), cudaMemcpyHostToDevice));
  }
  ~DeviceBytes() { cudaFree(p); }
};

// Where two runs' bytes first differ, or -1.
int64_t first_difference(const unsigned char* a, const unsigned char* b, int64_t bytes) {
  for (int64_t k = 0; k < bytes; ++k)
    if (a[k] != b[k]) return k;
  return -1;
}

// Whether every byte of [from, size) still holds the poison.
bool untouched(const HostBytes& memory, int64_t from) {
  for (int64_t k = from; k < memory.size; ++k)
    if (memory.p[k] != kPoison) return false;
  return true;
}

struct Case {
  std::string name;
  OutputFormat format;
  OutputOptions options;
};

// The cases for images of size x size pixels (padding up to a quarter of a tile: encoded runs).
std::vector<Case> cases(int size) {
  std::vector<Case> all;
  OutputOptions plain;
  plain.image_size = size;
  all.push_back({"png", OutputFormat::Png, plain});
  all.push_back({"tar", OutputFormat::Tar, plain});
  OutputOptions shards = plain;
  shards.shard_images = 5;
  shards.facts.model = "m \"1\".bin";
  shards.facts.precision = "bf16";
  shards.facts.image_seed = [](int64_t index) { return static_cast<uint64_t>(index) * 0x9e3779b97f4a7c15ull; };
  all.push_back({"tar in shards of 5, seeds", OutputFormat::Tar, shards});
  OutputOptions by_seed = shards;  // --seeds: each sample keyed by its seed, the model by its digest
  by_seed.facts.model_xxh3 = "0123456789abcdef0123456789abcdef";
  by_seed.facts.named_by_seed = true;
  all.push_back({"tar in shards of 5, named by seed", OutputFormat::Tar, by_seed});
  all.push_back({"png named by seed", OutputFormat::Png, by_seed});
  OutputOptions ones = plain;
  ones.shard_images = 1;
  all.push_back({"tar in shards of 1", OutputFormat::Tar, ones});
  all.push_back({"bmp", OutputFormat::Bmp, plain});
  all.push_back({"mosaic-png", OutputFormat::MosaicPng, plain});
  OutputOptions grid = plain;
  grid.grid_columns = 7;
  grid.grid_padding = 2;
  all.push_back({"bmp, 7 columns, padding 2", OutputFormat::Bmp, grid});
  OutputOptions split = plain;
  split.mosaic_tiles = 4;
  split.grid_padding = size / 4;
  all.push_back({"mosaic-png split at 16 tiles, padding " + std::to_string(split.grid_padding), OutputFormat::MosaicPng, split});
  for (Case& c : all) c.name += ", " + std::to_string(size) + "x" + std::to_string(size);
  return all;
}

}  // namespace

TEST_CASE("GPU encoders: level-0 PNGs of every size are the encoder's, byte for byte") {
  const std::vector<std::pair<int, int>> sizes = {{64, 64}, {32, 32},   {128, 128}, {1, 1},
                                                  {3, 5},   {200, 120}, {21845, 1}, {7, 127}};
  GpuRunEncoder encoder(0);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  for (const auto& size : sizes) {
    const int width = size.first, height = size.second;
    for (int64_t count : {1, 3, 127}) {
      if (int64_t{width} * height * count > 64 * 64 * 127) continue;
      INFO(width << " x " << height << ", " << count << " images");
      const int64_t image_bytes = int64_t{width} * height * 3;
      const std::vector<unsigned char> pixels = random_pixels(count * image_bytes, test_seed() + width * 131 + height + count);
      const DeviceBytes device(pixels);
      RunMemory memory(png_records_capacity(count, width, height), count % 2 == 1);
      EncodedRun run;
      plan_png_records(count, width, height, memory.memory(), run);
      encoder.encode(EncodedRuns{false, {&run}}, device.p, count, stream);
      PngEncoder png_encoder(0);
      std::string png;
      int wrong = 0;
      for (int64_t i = 0; i < count; ++i) {
        png_encoder.encode(pixels.data() + i * image_bytes, width, height, png);
        const int64_t bytes = run.record_at[i + 1] - run.record_at[i];
        const bool same = bytes == static_cast<int64_t>(png.size()) &&
                          std::memcmp(run.bytes + run.record_at[i], png.data(), png.size()) == 0;
        if (!same && wrong++ < 3) {
          MESSAGE("image " << i << ": first difference at byte "
                           << first_difference(run.bytes + run.record_at[i],
                                               reinterpret_cast<const unsigned char*>(png.data()), bytes));
        }
      }
      CHECK(wrong == 0);
      CHECK(untouched(memory.bytes, run.used));
    }
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST_CASE("GPU encoders: every format's runs equal the CPU model's, and whole outputs the formats' own files") {
  GpuRunEncoder encoder(0);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  int variant = 0;
  for (const int size : kImageSizes) {
    for (const Case& c : cases(size)) {
      for (int64_t count : {1, 3, 127}) {
        // A whole output (first 0, total count), and a run from inside the output (first 7 of
        // count + 11 images: inside a shard of 5, across shard and mosaic edges).
        for (int64_t first : {0, 7}) {
          ++variant;
          INFO(c.name << ": images [" << first << ", " << first + count << ")");
          const int64_t total = first == 0 ? count : first + count + 4;
          const OutputLayout layout(c.format, "r", total, c.options);
          REQUIRE(layout.encoded_kind() != EncodedKind::None);
          const std::vector<unsigned char> pixels = random_pixels(count * rgb8_image_bytes(size), test_seed() * 7 + variant);
          const DeviceBytes device(pixels);
          const EncodedCapacity capacity = layout.encoded_capacity(count);
          RunMemory on_gpu(capacity, variant % 2 == 0), on_host(capacity, false);
          EncodedRun gpu_run, host_run;
          layout.plan_encoded_run(first, count, on_gpu.memory(), gpu_run, 2);
          layout.plan_encoded_run(first, count, on_host.memory(), host_run, 2);
          encoder.encode(EncodedRuns{false, {&gpu_run}}, device.p, count, stream);
          encode_run_on_host(host_run, pixels.data(), 2);
          REQUIRE(gpu_run.used == host_run.used);
          const int64_t at = first_difference(gpu_run.bytes, host_run.bytes, gpu_run.used);
          CHECK_MESSAGE(at == -1, "the GPU's bytes differ from the CPU model's first at byte " << at << " of " << gpu_run.used);
          CHECK_MESSAGE(untouched(on_gpu.bytes, gpu_run.used), "bytes written past the run's end");
          if (first == 0) {
            ImageRun encoded{ImageEncoding::Rgb8, nullptr, 3, size};
            encoded.encoded = &gpu_run;
            const std::vector<std::string> want = encode_in_memory(layout, ImageRun::rgb8(pixels.data(), 3, size), 2);
            const std::vector<std::string> got = encode_in_memory(layout, encoded, 2);
            REQUIRE(got.size() == want.size());
            int differing = 0;
            for (size_t k = 0; k < want.size(); ++k) differing += got[k] != want[k];
            CHECK_MESSAGE(differing == 0, differing << " of " << want.size() << " files differ from the formats' own");
          }
        }
      }
    }
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
}

namespace {

// A stream of jobs with encoded runs on a pipeline of `spec`'s network (see the test below).
void check_encoded_jobs(const ModelSpec& spec) {
  const auto net = reference::random_network(test_seed() + 21 + spec.image_size, spec);
  const int size = spec.image_size;
  const int64_t image_bytes = rgb8_image_bytes(size);
  const std::vector<int64_t> sizes = {1, 3, 63, 64, 65, 130, 7};
  int64_t total = 0;
  for (int64_t n : sizes) total += n;
  std::mt19937_64 rng(test_seed() + 22);
  std::normal_distribution<float> normal;
  std::vector<float> z(static_cast<size_t>(total * spec.latent_dim));
  for (auto& v : z) v = normal(rng);
  OutputOptions tar_options;
  tar_options.image_size = size;
  tar_options.shard_images = 5;
  OutputOptions png_options;
  png_options.image_size = size;
  OutputOptions grid_options;
  grid_options.image_size = size;
  grid_options.grid_columns = 7;
  grid_options.grid_padding = 2;
  const std::vector<OutputLayout> layouts = {OutputLayout(OutputFormat::Tar, "r", total, tar_options),
                                             OutputLayout(OutputFormat::Png, "r", total, png_options),
                                             OutputLayout(OutputFormat::Bmp, "r", total, grid_options)};
  for (Precision p : kPrecisions) {
    INFO(name(p) << ", " << size << "x" << size);
    GpuPipeline pipeline(net.data(), spec, p, 64, 0, ImageEncoding::Rgb8);
    std::vector<unsigned char> pixels(static_cast<size_t>(total * image_bytes));
    std::vector<uint8_t> flags(static_cast<size_t>(total));
    pipeline.generate_checked(z.data(), total, pixels.data(), flags.data());
    struct Job {
      int64_t first = 0, n = 0;
      bool locked = false;
      std::unique_ptr<HostBytes> images, flags;
      std::vector<std::unique_ptr<RunMemory>> memory;
      std::vector<EncodedRun> runs;
      EncodedRuns encoded;
    };
    std::vector<Job> jobs(sizes.size());
    int64_t first = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
      Job& job = jobs[k];
      job.first = first;
      job.n = sizes[k];
      job.locked = k % 2 == 1;
      job.images = std::make_unique<HostBytes>(job.n * image_bytes, job.locked);
      job.flags = std::make_unique<HostBytes>(job.n, job.locked);
      job.runs.resize(layouts.size());
      job.encoded.pixels = k % 2 == 0;
      for (size_t o = 0; o < layouts.size(); ++o) {
        job.memory.push_back(std::make_unique<RunMemory>(layouts[o].encoded_capacity(job.n), job.locked));
        layouts[o].plan_encoded_run(job.first, job.n, job.memory[o]->memory(), job.runs[o], 2);
        job.encoded.runs.push_back(&job.runs[o]);
      }
      first += job.n;
    }
    size_t next = 0, done = 0;
    pipeline.generate_stream(
        [&](StreamJob& job) {
          if (next == jobs.size()) return false;
          Job& j = jobs[next++];
          job = StreamJob{z.data() + j.first * spec.latent_dim, j.n,
                          {ImageEncoding::Rgb8, j.images->p, j.flags->p, spec.latent_dim, spec.image_channels, size, &j.encoded}};
          return true;
        },
        [&](const StreamJob&) { ++done; });
    CHECK(done == jobs.size());
    for (size_t k = 0; k < jobs.size(); ++k) {
      const Job& job = jobs[k];
      INFO("job " << k << ": images [" << job.first << ", " << job.first + job.n << "), "
                  << (job.locked ? "page-locked" : "plain") << (job.encoded.pixels ? ", with its pixels" : ""));
      CHECK(std::memcmp(job.flags->p, flags.data() + job.first, static_cast<size_t>(job.n)) == 0);
      if (job.encoded.pixels) {
        CHECK(std::memcmp(job.images->p, pixels.data() + job.first * image_bytes,
                          static_cast<size_t>(job.n * image_bytes)) == 0);
      } else {
        CHECK_MESSAGE(untouched(*job.images, 0), "pixels delivered where the job did not ask for them");
      }
      for (size_t o = 0; o < layouts.size(); ++o) {
        INFO(format_name(layouts[o].format()));
        RunMemory host(layouts[o].encoded_capacity(job.n), false);
        EncodedRun want;
        layouts[o].plan_encoded_run(job.first, job.n, host.memory(), want, 1);
        encode_run_on_host(want, pixels.data() + job.first * image_bytes, 2);
        REQUIRE(job.runs[o].used == want.used);
        const int64_t at = first_difference(job.runs[o].bytes, want.bytes, want.used);
        CHECK_MESSAGE(at == -1, "first difference at byte " << at << " of " << want.used);
        CHECK(untouched(job.memory[o]->bytes, want.used));
      }
    }
  }
}

}  // namespace

TEST_CASE("GPU pipeline: jobs with encoded runs get the CPU model's bytes of the pipeline's own pixels") {
  // Jobs of odd sizes around the batch of 64 (one batch, several, a ragged last one), consecutive
  // images of a tar in shards of 5, a png folder and a bmp mosaic; every other job also asks for its
  // pixels; targets page-locked and plain by turns; everything poisoned. Networks of every image size,
  // grey ones among them.
  for (const ModelSpec& spec : {kShpcSpec, ModelSpec{100, 128, 3, 4, false, 32}, ModelSpec{37, 16, 1, 5, true, 32},
                                ModelSpec{100, 32, 3, 4, false, 128}, ModelSpec{64, 16, 1, 5, true, 128}}) {
    CAPTURE(spec.image_size);
    check_encoded_jobs(spec);
  }
}

}  // namespace facegen
