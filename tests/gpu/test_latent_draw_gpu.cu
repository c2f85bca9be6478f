// test_latent_draw_gpu.cu: drawn latents made on the GPU (generator/device_latents.hpp,
// kernels/latent_draw.cu) against the host's (recipe_value, common/latent_draw.hpp), bit for bit.
//
// Fresh seeds each run (test_seed()); every drawn source (--random from any first image, --seeds),
// untruncated and truncated, nz 100 and 7, odd sizes and batch edges, outputs poisoned beforehand and
// the room past them checked untouched. The GPU's raw draws are compared with glibc's: within the
// documented error, and every float that differs is one the GPU doubted. Through the CUDA backend, a
// stream of jobs given as recipes gives the bytes of the same jobs given as host latents.
#include "tests/gpu/gpu_test_support.cuh"

#include "common/threads.hpp"
#include "generator/backend.hpp"
#include "generator/device_latents.hpp"
#include "generator/network.hpp"
#include "kernels/latent_draw.cuh"
#include "latents/latent_source.hpp"
#include "latents/seed_list.hpp"

namespace facegen {
namespace {

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Draw 0 of every value of images [first, first + n) of seed's sequence: the GPU's z and its doubt.
__global__ void raw_draws_kernel(uint64_t seed, int64_t first, int n, int nz, double* z, unsigned char* doubt) {
  const int64_t values = int64_t{n} * nz;
  for (int64_t at = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; at < values; at += int64_t{gridDim.x} * blockDim.x) {
    const uint64_t key = value_key(seed, static_cast<uint64_t>(first + at / nz), static_cast<uint64_t>(at % nz));
    gpu::DeviceBoxMuller box_muller;
    const double u1 = 1.0 - unit_interval(value_word(key, 1));
    z[at] = box_muller(u1, unit_interval(value_word(key, 2)));
    doubt[at] = box_muller.uncertain;
  }
}

// Job images [first, first + n) of `recipe` made by `drawn`, batch after batch of max_batch, into a
// poisoned device buffer; the room for `pad` more images after them must stay poisoned.
std::vector<float> gpu_latents(DeviceLatents& drawn, const LatentRecipe& recipe, int64_t first, int64_t n, int nz,
                               int max_batch) {
  const int64_t pad = 3;
  DeviceBuffer out(sizeof(float) * static_cast<size_t>((n + pad) * nz));
  out.poison();
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (int64_t b = 0; b < n; b += max_batch) {
    const int nb = static_cast<int>(std::min<int64_t>(max_batch, n - b));
    drawn.enqueue(recipe, first + b, nb, static_cast<float*>(out.p) + b * nz, stream);
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaStreamDestroy(stream));
  std::vector<float> got(static_cast<size_t>((n + pad) * nz));
  CUDA_CHECK(cudaMemcpy(got.data(), out.p, out.bytes, cudaMemcpyDeviceToHost));
  int64_t touched = 0;
  for (int64_t i = n * nz; i < (n + pad) * nz; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &got[static_cast<size_t>(i)], sizeof bits);
    touched += bits != 0xffffffffu;
  }
  CHECK_MESSAGE(touched == 0, touched << " values written past the batch's images");
  got.resize(static_cast<size_t>(n * nz));
  return got;
}

// The host's values of the same images, on every core.
std::vector<float> host_latents(const LatentRecipe& recipe, int64_t first, int64_t n, int nz) {
  std::vector<float> want(static_cast<size_t>(n * nz));
  parallel_for(n, 0, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      for (int v = 0; v < nz; ++v) want[static_cast<size_t>(i * nz + v)] = recipe_value(recipe, first + i, v);
  });
  return want;
}

// Counts the values whose bits differ, naming the first few.
int64_t count_differences(const std::vector<float>& got, const std::vector<float>& want, int nz, std::string* shown) {
  int64_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (same_bits(got[i], want[i])) continue;
    if (bad++ < 5) {
      *shown += " [image " + std::to_string(i / nz) + ", value " + std::to_string(i % nz) + ": " + std::to_string(got[i]) +
                " for " + std::to_string(want[i]) + "]";
    }
  }
  return bad;
}

std::shared_ptr<const SeedList> random_seed_list(std::mt19937_64& rng, int64_t count) {
  std::string text;
  for (int64_t k = 0; k < count; ++k) text += (k ? "," : "") + std::to_string(rng());
  return std::make_shared<const SeedList>(SeedList::parse(text));
}

}  // namespace

TEST_CASE("GPU latents equal the host's bit for bit: every drawn source, truncated or not, odd sizes, batch edges") {
  std::mt19937_64 rng(test_seed() + 71);
  const int max_batch = 1000;
  std::vector<int64_t> sizes;
  for (int n : batch_sizes()) sizes.push_back(n);
  sizes.push_back(max_batch + 1);
  for (int nz : {100, 7}) {
    DeviceLatents drawn(max_batch, nz);
    for (double truncation : {0.0, 0.3, 1.0, 2.5}) {
      for (int64_t n : sizes) {
        const uint64_t seed = rng();
        const int64_t first = static_cast<int64_t>(rng() % (int64_t{1} << 40));
        auto random = make_random_latents(first + n + 5, seed, 0, nz, truncation);
        auto listed = make_seed_latents(random_seed_list(rng, n + 5), nz, truncation);
        const int64_t listed_first = static_cast<int64_t>(rng() % 5);
        using Part = std::pair<LatentSource*, int64_t>;  // a source and the image the job starts at
        for (const Part& part : {Part{random.get(), first}, Part{listed.get(), listed_first}}) {
          LatentSource* source = part.first;
          const int64_t at = part.second;
          std::vector<uint64_t> seeds(static_cast<size_t>(n));
          const LatentRecipe recipe = source->recipe(at, n, seeds.data());
          // The job's images in one call from image 0 (batches at the job's own offsets).
          const std::vector<float> got = gpu_latents(drawn, recipe, 0, n, nz, max_batch);
          const std::vector<float> want = host_latents(recipe, 0, n, nz);
          std::string shown;
          const int64_t bad = count_differences(got, want, nz, &shown);
          INFO(source->describe() << ", nz " << nz << ", " << n << " images from image " << at << shown);
          CHECK(bad == 0);
          // And read_range's values are these.
          std::vector<float> read(static_cast<size_t>(n * nz));
          source->read_range(at, n, read.data());
          CHECK(std::memcmp(read.data(), want.data(), read.size() * sizeof(float)) == 0);
        }
      }
    }
    MESSAGE("nz " << nz << ": " << drawn.made_on_host() << " values made on the host");
  }
}

TEST_CASE("GPU latents: the values the GPU doubts are made on the host and patched in, however many") {
  // A detector bound of 2^-10 doubts most values: the host makes them, and the batch is the same.
  std::mt19937_64 rng(test_seed() + 72);
  const int nz = 100, max_batch = 512;
  for (double agreement : {0x1.0p-10, kDrawAgreement}) {
    DeviceLatents drawn(max_batch, nz, agreement);
    const Truncation truncation = agreement > 1e-6 ? truncation_to(0.8) : Truncation{};
    const LatentRecipe recipe{rng(), static_cast<int64_t>(rng() % 1000000), nullptr, truncation};
    const int64_t n = 4 * max_batch + 17;
    const std::vector<float> got = gpu_latents(drawn, recipe, 0, n, nz, max_batch);
    std::string shown;
    const int64_t bad = count_differences(got, host_latents(recipe, 0, n, nz), nz, &shown);
    INFO("agreement " << agreement << shown);
    CHECK(bad == 0);
    if (agreement > 1e-6) CHECK(drawn.made_on_host() > n * nz / 2);
    else CHECK(drawn.made_on_host() < n * nz / 1000);
  }
}

TEST_CASE("GPU draws are within the documented error of glibc's, and every float they change was doubted") {
  std::mt19937_64 rng(test_seed() + 73);
  const int nz = 100, n = 40000;
  const size_t values = size_t(n) * nz;
  DeviceBuffer z_device(sizeof(double) * values), doubt_device(values);
  double worst = 0;  // |z_gpu - z_host| / |z_host|, in units of 2^-53
  int64_t changed = 0, doubted = 0;
  for (int round = 0; round < 4; ++round) {
    const uint64_t seed = rng();
    const int64_t first = static_cast<int64_t>(rng() % (int64_t{1} << 40));
    raw_draws_kernel<<<grid_blocks(static_cast<int64_t>(values), 256), 256>>>(
        seed, first, n, nz, static_cast<double*>(z_device.p), static_cast<unsigned char*>(doubt_device.p));
    CUDA_CHECK_LAUNCH();
    std::vector<double> z(values);
    std::vector<unsigned char> doubt(values);
    CUDA_CHECK(cudaMemcpy(z.data(), z_device.p, z_device.bytes, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(doubt.data(), doubt_device.p, doubt_device.bytes, cudaMemcpyDeviceToHost));
    for (size_t at = 0; at < values; ++at) {
      const double host = random_latent_value(seed, static_cast<uint64_t>(first + at / nz), at % nz);
      if (host != 0) worst = std::max(worst, std::fabs(z[at] - host) / std::fabs(host) * 0x1.0p53);
      doubted += doubt[at];
      if (same_bits(static_cast<float>(z[at]), static_cast<float>(host))) continue;
      ++changed;
      CHECK_MESSAGE(doubt[at], "value " << at << " of seed " << seed << ": the GPU's float differs and was not doubted");
    }
  }
  MESSAGE("largest difference " << worst << " x 2^-53 of |z| (budget 12); " << changed << " floats changed, " << doubted
                                << " values doubted of " << 4 * values);
  CHECK(worst <= 12);  // the documented errors hold here; the detector's bound is 680 times this
}

TEST_CASE("CUDA backend: jobs of drawn latents given as recipes give the bytes of the same jobs given as latents") {
  std::mt19937_64 rng(test_seed() + 74);
  const Network net = make_random_network(rng());
  const char* cap_text = std::getenv("FACEGEN_GPU_TEST_MAX_BATCH");
  const int64_t cap = cap_text ? std::atoll(cap_text) : 1 << 30;
  for (Precision precision : {Precision::Fp32, Precision::Bf16}) {
    for (ImageEncoding encoding : {ImageEncoding::Float32, ImageEncoding::Rgb8}) {
      BackendOptions options;
      options.device = DeviceKind::Cuda;
      options.max_batch = 127;
      options.precision = precision;
      options.images = encoding;
      auto gpu = make_cuda_backend(net, options);
      REQUIRE(gpu->draws_latents());
      const int64_t bytes_per_image = image_bytes(encoding, 3);
      const double truncation = (rng() % 2) ? 0.0 : 0.9;
      auto random = make_random_latents(5000, rng(), 0, kLatentDim, truncation);
      auto listed = make_seed_latents(random_seed_list(rng, 1100), kLatentDim, truncation);
      struct Job {
        LatentSource* source;
        int64_t first, n;
        std::vector<uint64_t> seeds;
        LatentRecipe recipe;
        std::vector<float> latents;
        HostBuffer images{nullptr, nullptr}, flags{nullptr, nullptr}, want{nullptr, nullptr}, want_flags{nullptr, nullptr};
      };
      std::vector<Job> jobs;
      for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{127}, int64_t{128}, int64_t{300}, int64_t{1000}}) {
        if (n > cap) continue;
        Job job{jobs.size() % 2 ? listed.get() : random.get(), static_cast<int64_t>(rng() % 50), n};
        job.seeds.resize(static_cast<size_t>(n));
        job.recipe = job.source->recipe(job.first, n, job.seeds.data());
        job.latents.resize(static_cast<size_t>(n * kLatentDim));
        job.source->read_range(job.first, n, job.latents.data());
        for (HostBuffer* buffer : {&job.images, &job.want}) {
          *buffer = gpu->allocate_host(static_cast<size_t>(n * bytes_per_image));
          std::memset(buffer->get(), 0xCD, static_cast<size_t>(n * bytes_per_image));
        }
        for (HostBuffer* buffer : {&job.flags, &job.want_flags}) {
          *buffer = gpu->allocate_host(static_cast<size_t>(n));
          std::memset(buffer->get(), 0x77, static_cast<size_t>(n));
        }
        jobs.push_back(std::move(job));
      }
      for (bool recipes : {false, true}) {
        size_t next = 0;
        gpu->generate_stream(
            [&](StreamJob& job) {
              if (next == jobs.size()) return false;
              Job& j = jobs[next++];
              void* images = recipes ? j.images.get() : j.want.get();
              uint8_t* flags = static_cast<uint8_t*>(recipes ? j.flags.get() : j.want_flags.get());
              job = StreamJob{recipes ? nullptr : j.latents.data(), j.n, {encoding, images, flags, kLatentDim, 3},
                              recipes ? &j.recipe : nullptr};
              return true;
            },
            [](const StreamJob&) {}, 0);
      }
      INFO("precision " << precision_name(precision) << ", " << (encoding == ImageEncoding::Rgb8 ? "8-bit" : "float32")
                        << ", truncation " << truncation);
      for (const Job& job : jobs) {
        INFO(job.source->describe() << ": " << job.n << " images from image " << job.first);
        CHECK(std::memcmp(job.images.get(), job.want.get(), static_cast<size_t>(job.n * bytes_per_image)) == 0);
        CHECK(std::memcmp(job.flags.get(), job.want_flags.get(), static_cast<size_t>(job.n)) == 0);
      }
    }
  }
  // FACEGEN_GPU_LATENTS=host: the backend takes latents only; a bad value is one sentence.
  setenv("FACEGEN_GPU_LATENTS", "host", 1);
  BackendOptions options;
  options.device = DeviceKind::Cuda;
  CHECK_FALSE(make_cuda_backend(net, options)->draws_latents());
  setenv("FACEGEN_GPU_LATENTS", "gpu", 1);
  CHECK_THROWS_WITH(make_cuda_backend(net, options), "FACEGEN_GPU_LATENTS must be device or host, not 'gpu'");
  unsetenv("FACEGEN_GPU_LATENTS");
}

}  // namespace facegen
