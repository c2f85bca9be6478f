// bench_small_files.cpp: writers of many small files in folders (see bench_small_files.hpp).
#include "bench/bench_small_files.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "common/temp_registry.hpp"
#include "engine/output_files.hpp"
#include "formats/output_format.hpp"
#include "formats/png_folder_layout.hpp"

namespace bench {
namespace {

constexpr int64_t kRunFiles = 1000;   // a subfolder's worth: what the engine hands a run's writers
constexpr int64_t kGrainFiles = 32;   // files a writer takes at once, inside one TempCreation
constexpr int kSampledFiles = 64;

// Pseudo-random bytes, the same in every file but for bytes [0, 8): the file's number.
const std::string& base_bytes(int64_t bytes) {
  static std::string base;
  if (static_cast<int64_t>(base.size()) != bytes) {
    base.assign(static_cast<size_t>(bytes), '\0');
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (char& c : base) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      c = static_cast<char>(state >> 56);
    }
  }
  return base;
}

void stamp(std::string& bytes, int64_t index) { std::memcpy(&bytes[0], &index, std::min<size_t>(8, bytes.size())); }

double cpu_seconds(const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; }

// One folder of the measurement: its OutputFiles and the files' paths inside it.
struct Folder {
  std::unique_ptr<facegen::OutputFiles> files;
  facegen::PngLayout layout = facegen::PngLayout::Flat;
  int64_t total = 0;
};

Folder make_folder(const std::string& path, int64_t total, facegen::PngLayout layout) {
  Folder folder;
  folder.layout = layout;
  folder.total = total;
  facegen::OutputFile spec{facegen::OutputFile::Kind::Folder, path, "", -1, 0, total, {},
                           facegen::OutputFormat::Png,
                           facegen::png_longest_relative_path(total, layout, facegen::SampleFacts())};
  folder.files = std::make_unique<facegen::OutputFiles>(facegen::FileList{1, [spec](size_t) { return spec; }});
  folder.files->create(0);
  return folder;
}

// Writes file `index` (its number in `folder`, `global` its number in the measurement) the plan's way.
void write_one(const SmallFilesPlan& plan, Folder& folder, int64_t index, const std::string& bytes) {
  const std::string name = facegen::png_relative_path(index, folder.total, folder.layout, facegen::SampleFacts());
  if (plan.way == "pngs-path") {
    folder.files->FileWriter::write_in_folder(0, name, name, bytes);  // the whole path, as before
  } else {
    folder.files->write_in_folder(0, name, name, bytes);
  }
}

// Where file `global` lives: its folder and its number there.
std::pair<size_t, int64_t> locate(const SmallFilesPlan& plan, int64_t global) {
  if (plan.way != "pngs-own") return {0, global};
  const int64_t per = (plan.files + plan.writers - 1) / plan.writers;
  return {static_cast<size_t>(global / per), global % per};
}

void run_writers(const SmallFilesPlan& plan, std::vector<Folder>& folders) {
  const std::string& base = base_bytes(plan.file_bytes);
  if (plan.way == "pngs-own") {  // each writer its own folder, its own contiguous files
    std::vector<std::thread> threads;
    for (int w = 0; w < plan.writers; ++w) {
      threads.emplace_back([&, w] {
        const int64_t per = (plan.files + plan.writers - 1) / plan.writers;
        std::string bytes = base;
        for (int64_t g = w * per; g < std::min(plan.files, (w + 1) * per); g += kGrainFiles) {
          facegen::TempCreation creating;
          for (int64_t f = g; f < std::min({plan.files, (w + 1) * per, g + kGrainFiles}); ++f) {
            stamp(bytes, f);
            write_one(plan, folders[static_cast<size_t>(w)], f - w * per, bytes);
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    return;
  }
  const int64_t runs = (plan.files + kRunFiles - 1) / kRunFiles;
  const int groups = std::max(1, plan.writers / plan.group);
  std::vector<std::atomic<int64_t>> next(static_cast<size_t>(runs));
  for (auto& n : next) n = 0;
  std::vector<std::thread> threads;
  for (int w = 0; w < plan.writers; ++w) {
    threads.emplace_back([&, w] {
      std::string bytes = base;
      for (int64_t run = w % groups; run < runs; run += groups) {
        const int64_t first = run * kRunFiles, count = std::min(kRunFiles, plan.files - first);
        for (int64_t g; (g = next[static_cast<size_t>(run)].fetch_add(kGrainFiles)) < count;) {
          facegen::TempCreation creating;  // as the sink holds one around a grain
          for (int64_t f = first + g; f < first + std::min(count, g + kGrainFiles); ++f) {
            stamp(bytes, f);
            write_one(plan, folders[0], f, bytes);
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
}

// Reads back kSampledFiles files spread over the measurement; "" when each is right.
std::string verify(const SmallFilesPlan& plan, std::vector<Folder>& folders) {
  for (int s = 0; s < kSampledFiles; ++s) {
    const int64_t global = std::min(plan.files - 1, plan.files * s / kSampledFiles + s % 3);
    const auto [folder, index] = locate(plan, global);
    const std::string path = folders[folder].files->temp_path(0) + "/" +
                             facegen::png_relative_path(index, folders[folder].total, folders[folder].layout, facegen::SampleFacts());
    std::string expected = base_bytes(plan.file_bytes);
    stamp(expected, global);
    std::string got(expected.size() + 1, '\0');
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    const ssize_t n = fd < 0 ? -1 : ::read(fd, &got[0], got.size());
    if (fd >= 0) ::close(fd);
    if (n != static_cast<ssize_t>(expected.size()) || got.compare(0, expected.size(), expected) != 0) return path;
  }
  return "";
}

}  // namespace

bool is_small_files_way(const std::string& way) {
  return way == "pngs-path" || way == "pngs-flat" || way == "pngs-sub" || way == "pngs-own";
}

SmallFilesResult measure_small_files(const SmallFilesPlan& plan) {
  const facegen::PngLayout layout = plan.way == "pngs-sub" ? facegen::PngLayout::Subfolders : facegen::PngLayout::Flat;
  base_bytes(plan.file_bytes);  // made before the timing
  rusage before, after;
  ::getrusage(RUSAGE_SELF, &before);
  const auto start = std::chrono::steady_clock::now();
  std::vector<Folder> folders;
  const int count = plan.way == "pngs-own" ? plan.writers : 1;
  const int64_t per = plan.way == "pngs-own" ? (plan.files + plan.writers - 1) / plan.writers : plan.files;
  for (int k = 0; k < count; ++k) {
    folders.push_back(make_folder(plan.dir + "/bench-pngs-" + std::to_string(k), per, layout));
  }
  run_writers(plan, folders);
  for (Folder& folder : folders) folder.files->finish();  // one syncfs each
  SmallFilesResult result;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ::getrusage(RUSAGE_SELF, &after);
  result.user_us_per_file = (cpu_seconds(after.ru_utime) - cpu_seconds(before.ru_utime)) * 1e6 / plan.files;
  result.system_us_per_file = (cpu_seconds(after.ru_stime) - cpu_seconds(before.ru_stime)) * 1e6 / plan.files;
  result.mismatch = verify(plan, folders);
  result.verified = result.mismatch.empty();
  return result;  // the folders' destructors remove every file
}

}  // namespace bench
