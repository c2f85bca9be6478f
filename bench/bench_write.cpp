// bench_write.cpp: `make bench-write`, how fast one directory's file system takes bytes into ONE file
// against into separate files, by writer count and by way of writing: the write ceilings that a
// fixed-offset output (npy, bmp) can reach there; with and without the page cache (O_DIRECT); and
// how fast it takes many small files (a folder of PNGs).
//
//   build/facegen-bench-write DIR [--mib M] [--writers 1,4,16] [--ways pwrite,mmap,...] [--processes]
//                                 [--block-kib K] [--best] [--files F] [--file-bytes B] [--group G]
//
// M MiB in all per measurement (default 8192), cut into one contiguous range per writer, written in
// blocks of K KiB (default 4096; the program's npy pieces are 384 KiB at a chunk of 1024 on 16
// threads) from a buffer of pseudo-random bytes (each block stamped with its index). Ways:
//   files          each writer pwrite()s its own file: the many-files ceiling;
//   files-direct   the same through facegen's direct writer (engine/direct_write.hpp): O_DIRECT from
//                  aligned memory;
//   files-bounce   the same from memory 64 bytes off alignment: each block copied into the writer's
//                  aligned buffer first;
//   pwrite         every writer pwrite()s its range of one file (buffered writes to one inode);
//   pwrite-direct  the same with O_DIRECT;
//   mmap           one file sized with fallocate, mapped MAP_SHARED, each writer memcpy()s into its range;
//   mmap-madv      the same, each writer first populating its range with MADV_POPULATE_WRITE;
//   mmap-pop       the same, the whole mapping populated by mmap(MAP_POPULATE) (by one thread);
//   pngs-path, pngs-flat, pngs-sub, pngs-own   F small files of B bytes (default 65,536 of 12,711:
//                  one 64 x 64 PNG), G writers a run of 1,000 (bench_small_files.hpp)
// pwrite and the mmap ways fallocate the whole file first. Every timing covers
// creating the file(s), writing, and the flush (msync(MS_SYNC) of each range, then fdatasync) and
// closing; removing the file is outside it. A direct way where the file system takes no O_DIRECT
// (tmpfs) says so and is passed over. --processes: the writers are forked processes, each
// opening and mapping the file itself (as MPI ranks would), not threads of one process.
// After each measurement, 64 blocks spread over the file are read back and compared (the stamp and
// the bytes): a wrong byte ends the benchmark with "MISMATCH" and exit status 1 before its figure
// is printed. --best prints, last, "best one-file: WAY N writers R MB/s" and "best files: ...".
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_small_files.hpp"
#include "engine/direct_write.hpp"
#include "engine/pwrite_fully.hpp"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older headers lack the name
#endif

namespace {

int64_t kBlock = int64_t{4} << 20;  // --block-kib; set once before any writer starts
constexpr int kSampledBlocks = 64;

[[noreturn]] void die(const std::string& what, int err) {
  std::fprintf(stderr, "bench_write: %s: %s\n", what.c_str(), std::strerror(err));
  std::exit(1);
}

// The source block: pseudo-random bytes, the same in every writer; bytes [0, 8) carry the block index.
std::vector<char> source_block() {
  std::vector<char> block(kBlock);
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (int64_t i = 0; i < kBlock; i += 8) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    std::memcpy(block.data() + i, &state, 8);
  }
  return block;
}

struct Plan {
  std::string dir;
  int64_t blocks = 0;  // in all
  int writers = 1;
  std::string way;
  bool processes = false;
};

// Blocks [begin, end) of writer w.
void writer_range(const Plan& plan, int w, int64_t* begin, int64_t* end) {
  *begin = plan.blocks * w / plan.writers;
  *end = plan.blocks * (w + 1) / plan.writers;
}

bool maps_whole_file(const std::string& way) { return way.compare(0, 4, "mmap") == 0; }
// The ways that write whole blocks with O_DIRECT (engine/direct_write.hpp): from aligned memory, or
// (files-bounce) from memory 64 bytes off, through the writer's aligned buffer.
bool writes_direct(const std::string& way) {
  return way == "files-direct" || way == "files-bounce" || way == "pwrite-direct";
}
bool own_files(const std::string& way) { return way.compare(0, 5, "files") == 0; }

std::string one_file(const Plan& plan) { return plan.dir + "/bench-write.one"; }
std::string own_file(const Plan& plan, int w) { return plan.dir + "/bench-write." + std::to_string(w); }

void pwrite_fully(int fd, const char* data, int64_t bytes, int64_t offset, const std::string& path) {
  int err = 0;
  facegen::pwrite_fully(fd, offset, data, bytes, &err);
  if (err != 0) die("pwrite " + path, err);
}

// One writer's part: blocks [begin, end) at their offsets. `fd` is the file's (for `files`, the
// writer's own file, whose offsets start at its first block); `direct_fd` the same opened with O_DIRECT.
void write_part(const Plan& plan, int w, int fd, int direct_fd, char* mapping) {
  int64_t begin, end;
  writer_range(plan, w, &begin, &end);
  const std::vector<char> source = source_block();
  // An aligned copy of the block (64 bytes off for files-bounce), as page-locked buffers are.
  void* memory = nullptr;
  if (::posix_memalign(&memory, 4096, static_cast<size_t>(kBlock) + 4096) != 0) die("posix_memalign", ENOMEM);
  std::unique_ptr<char, decltype(&std::free)> owned(static_cast<char*>(memory), &std::free);
  char* block = owned.get() + (plan.way == "files-bounce" ? 64 : 0);
  std::memcpy(block, source.data(), static_cast<size_t>(kBlock));
  const bool own = own_files(plan.way);
  const facegen::DirectAlignment alignment = direct_fd >= 0 ? facegen::direct_alignment_of(fd) : facegen::DirectAlignment{};
  const std::string path = own ? own_file(plan, w) : one_file(plan);
  if (mapping != nullptr && plan.way == "mmap-madv" && end > begin &&
      ::madvise(mapping + begin * kBlock, (end - begin) * kBlock, MADV_POPULATE_WRITE) != 0) {
    die("madvise(MADV_POPULATE_WRITE) " + path, errno);
  }
  for (int64_t b = begin; b < end; ++b) {
    std::memcpy(block, &b, 8);
    const int64_t offset = (own ? b - begin : b) * kBlock;
    if (mapping != nullptr) {
      std::memcpy(mapping + b * kBlock, block, kBlock);
    } else if (alignment.usable()) {
      int err = 0;
      facegen::pwrite_direct(fd, direct_fd, alignment, offset, block, kBlock, &err);
      if (err != 0) die("pwrite (O_DIRECT) " + path, err);
    } else {
      pwrite_fully(fd, block, kBlock, offset, path);
    }
  }
  if (mapping != nullptr && end > begin && ::msync(mapping + begin * kBlock, (end - begin) * kBlock, MS_SYNC) != 0) {
    die("msync " + path, errno);
  }
  if (own && ::fdatasync(fd) != 0) die("fdatasync " + path, errno);
}

int open_file(const std::string& path, int64_t bytes) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) die("open " + path, errno);
  if (bytes > 0) {
    const int err = ::posix_fallocate(fd, 0, bytes);
    if (err != 0) die("fallocate " + path, err);
  }
  return fd;
}

char* map_file(const Plan& plan, int fd) {
  const int flags = MAP_SHARED | (plan.way == "mmap-pop" ? MAP_POPULATE : 0);
  void* p = ::mmap(nullptr, static_cast<size_t>(plan.blocks * kBlock), PROT_READ | PROT_WRITE, flags, fd, 0);
  if (p == MAP_FAILED) die("mmap " + one_file(plan), errno);
  return static_cast<char*>(p);
}

// The file at `path` opened again with O_DIRECT for a direct way, else -1.
int open_direct_for(const Plan& plan, const std::string& path) {
  if (!writes_direct(plan.way)) return -1;
  const int fd = facegen::open_direct(path.c_str());
  if (fd < 0) die("open (O_DIRECT) " + path, errno);
  return fd;
}

// One writer, as a thread or in a child process: opens (and maps) the file itself in a process.
void run_writer(const Plan& plan, int w, int shared_fd, int shared_direct_fd, char* shared_mapping) {
  if (own_files(plan.way)) {
    const int fd = open_file(own_file(plan, w), 0);
    const int direct_fd = open_direct_for(plan, own_file(plan, w));
    write_part(plan, w, fd, direct_fd, nullptr);
    if (direct_fd >= 0) ::close(direct_fd);
    if (::close(fd) != 0) die("close " + own_file(plan, w), errno);
    return;
  }
  if (!plan.processes) {
    write_part(plan, w, shared_fd, shared_direct_fd, shared_mapping);
    return;
  }
  const int fd = ::open(one_file(plan).c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) die("open " + one_file(plan), errno);
  char* mapping = maps_whole_file(plan.way) ? map_file(plan, fd) : nullptr;
  const int direct_fd = open_direct_for(plan, one_file(plan));
  write_part(plan, w, fd, direct_fd, mapping);
  if (direct_fd >= 0) ::close(direct_fd);
  if (mapping != nullptr && ::munmap(mapping, static_cast<size_t>(plan.blocks * kBlock)) != 0) die("munmap", errno);
  if (::close(fd) != 0) die("close " + one_file(plan), errno);
}

void run_writers(const Plan& plan, int shared_fd, int shared_direct_fd, char* shared_mapping) {
  if (plan.processes) {
    std::vector<pid_t> children;
    for (int w = 0; w < plan.writers; ++w) {
      const pid_t pid = ::fork();
      if (pid < 0) die("fork", errno);
      if (pid == 0) {
        run_writer(plan, w, -1, -1, nullptr);
        std::_Exit(0);
      }
      children.push_back(pid);
    }
    for (pid_t pid : children) {
      int status = 0;
      if (::waitpid(pid, &status, 0) < 0) die("waitpid", errno);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "bench_write: a writer process failed\n");
        std::exit(1);
      }
    }
    return;
  }
  std::vector<std::thread> threads;
  for (int w = 0; w < plan.writers; ++w) {
    threads.emplace_back(run_writer, std::cref(plan), w, shared_fd, shared_direct_fd, shared_mapping);
  }
  for (auto& t : threads) t.join();
}

// Times one measurement, flush and close included; returns seconds.
double measure(const Plan& plan) {
  const auto start = std::chrono::steady_clock::now();
  const bool one = !own_files(plan.way);
  const int64_t bytes = plan.blocks * kBlock;
  int fd = -1, direct_fd = -1;
  char* mapping = nullptr;
  if (one) {
    fd = open_file(one_file(plan), bytes);
    if (!plan.processes && maps_whole_file(plan.way)) mapping = map_file(plan, fd);
    if (!plan.processes) direct_fd = open_direct_for(plan, one_file(plan));
  }
  run_writers(plan, fd, direct_fd, mapping);
  if (direct_fd >= 0) ::close(direct_fd);
  if (mapping != nullptr && ::munmap(mapping, static_cast<size_t>(bytes)) != 0) die("munmap", errno);
  if (one) {
    if (::fdatasync(fd) != 0) die("fdatasync " + one_file(plan), errno);
    if (::close(fd) != 0) die("close " + one_file(plan), errno);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Reads back kSampledBlocks blocks spread over the data; true when each holds its stamp and bytes.
bool verify(const Plan& plan) {
  const std::vector<char> expected = source_block();
  std::vector<char> got(kBlock);
  for (int s = 0; s < kSampledBlocks; ++s) {
    const int64_t b = plan.blocks * s / kSampledBlocks + (s % 3) * (plan.blocks > 3 ? 1 : 0);
    if (b >= plan.blocks) continue;
    std::string path = one_file(plan);
    int64_t offset = b * kBlock;
    if (own_files(plan.way)) {
      int w = 0;
      int64_t begin, end;
      for (;; ++w) {
        writer_range(plan, w, &begin, &end);
        if (b < end) break;
      }
      path = own_file(plan, w);
      offset = (b - begin) * kBlock;
    }
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) die("open " + path, errno);
    const ssize_t n = ::pread(fd, got.data(), kBlock, offset);
    ::close(fd);
    int64_t stamp = -1;
    std::memcpy(&stamp, got.data(), 8);
    if (n != kBlock || stamp != b || std::memcmp(got.data() + 8, expected.data() + 8, kBlock - 8) != 0) {
      std::printf("MISMATCH: %s, %d writers: block %lld of %s reads wrong\n", plan.way.c_str(), plan.writers,
                  static_cast<long long>(b), path.c_str());
      return false;
    }
  }
  return true;
}

void remove_files(const Plan& plan) {
  ::unlink(one_file(plan).c_str());
  for (int w = 0; w < plan.writers; ++w) ::unlink(own_file(plan, w).c_str());
}

// One measurement of a small-files way (bench_small_files.hpp), printed; false when a file read back wrong.
bool measure_small_files_way(bench::SmallFilesPlan small, const std::string& way, int writers) {
  small.way = way;
  small.writers = writers;
  small.group = std::max(1, std::min(small.group, writers));
  if (writers < 1 || small.files < writers || small.file_bytes < 8) {
    std::fprintf(stderr, "bench_write: %s: writers, --files or --file-bytes out of range\n", way.c_str());
    std::exit(2);
  }
  const bench::SmallFilesResult result = bench::measure_small_files(small);
  if (!result.verified) {
    std::printf("MISMATCH: %s, %d writers: %s reads wrong\n", way.c_str(), writers, result.mismatch.c_str());
    return false;
  }
  std::printf("  %-9s %2d writers (%2d a run): %7.3f s %9.0f files/s  user %5.1f us  system %6.1f us a file\n",
              way.c_str(), writers, way == "pngs-own" ? 1 : small.group, result.seconds,
              static_cast<double>(small.files) / result.seconds, result.user_us_per_file, result.system_us_per_file);
  std::fflush(stdout);
  return true;
}

// Whether the file system of `dir` takes direct writes (a probe file's statx).
bool takes_direct_writes(const std::string& dir) {
  const std::string probe = dir + "/bench-write.probe";
  const int fd = ::open(probe.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) die("open " + probe, errno);
  const bool takes = facegen::direct_alignment_of(fd).usable();
  ::close(fd);
  ::unlink(probe.c_str());
  return takes;
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> items;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) items.push_back(item);
  return items;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') {
    std::fprintf(stderr,
                 "usage: facegen-bench-write DIR [--mib M] [--writers 1,4,16] [--ways files,files-direct,"
                 "files-bounce,pwrite,pwrite-direct,mmap,mmap-madv,mmap-pop,pngs-path,pngs-flat,pngs-sub,pngs-own] "
                 "[--processes] [--block-kib K] [--best] [--files F] [--file-bytes B] [--group G]\n");
    return 2;
  }
  Plan plan;
  plan.dir = argv[1];
  bench::SmallFilesPlan small;
  small.dir = plan.dir;
  int64_t mib = 8192;
  std::string writers_list = "1,4,16", ways_list = "files,pwrite,mmap,mmap-madv,mmap-pop";
  bool best = false;
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    const bool has_value = i + 1 < argc;
    if (flag == "--mib" && has_value) mib = std::atoll(argv[++i]);
    else if (flag == "--files" && has_value) small.files = std::atoll(argv[++i]);
    else if (flag == "--file-bytes" && has_value) small.file_bytes = std::atoll(argv[++i]);
    else if (flag == "--group" && has_value) small.group = std::atoi(argv[++i]);
    else if (flag == "--writers" && has_value) writers_list = argv[++i];
    else if (flag == "--ways" && has_value) ways_list = argv[++i];
    else if (flag == "--processes") plan.processes = true;
    else if (flag == "--block-kib" && has_value) kBlock = std::atoll(argv[++i]) * 1024;
    else if (flag == "--best") best = true;
    else {
      std::fprintf(stderr, "bench_write: unknown or incomplete flag '%s'\n", flag.c_str());
      return 2;
    }
  }
  if (kBlock < 4096 || kBlock % 4096 != 0) {
    std::fprintf(stderr, "bench_write: --block-kib expects a positive multiple of 4\n");
    return 2;
  }
  if (mib * (int64_t{1} << 20) < kBlock) {
    std::fprintf(stderr, "bench_write: --mib expects at least one block\n");
    return 2;
  }
  plan.blocks = mib * (int64_t{1} << 20) / kBlock;
  for (const std::string& way : split(ways_list)) {
    if (way != "files" && way != "pwrite" && way != "mmap" && way != "mmap-madv" && way != "mmap-pop" &&
        !writes_direct(way) && !bench::is_small_files_way(way)) {
      std::fprintf(stderr, "bench_write: unknown way '%s'\n", way.c_str());
      return 2;
    }
  }
  std::printf("%s: %lld MiB per measurement in %lld KiB blocks, writers as %s, flush inside the timing\n",
              plan.dir.c_str(), static_cast<long long>(plan.blocks * kBlock >> 20), static_cast<long long>(kBlock >> 10),
              plan.processes ? "processes" : "threads");
  std::string best_one, best_files;
  double best_one_rate = 0, best_files_rate = 0;
  for (const std::string& way : split(ways_list)) {
    for (const std::string& writers : split(writers_list)) {
      if (bench::is_small_files_way(way)) {
        if (!measure_small_files_way(small, way, std::atoi(writers.c_str()))) return 1;
        continue;
      }
      if (writes_direct(way) && !takes_direct_writes(plan.dir)) {
        std::printf("  %-13s O_DIRECT is not taken here (the file system reports no alignment for it)\n", way.c_str());
        break;
      }
      plan.way = way;
      plan.writers = std::atoi(writers.c_str());
      if (plan.writers < 1 || plan.writers > plan.blocks) {
        std::fprintf(stderr, "bench_write: writer count '%s' out of range\n", writers.c_str());
        return 2;
      }
      remove_files(plan);
      const double seconds = measure(plan);
      const bool ok = verify(plan);
      remove_files(plan);
      if (!ok) return 1;
      const double rate = plan.blocks * kBlock / 1e6 / seconds;
      std::printf("  %-13s %2d writers: %7.3f s %8.0f MB/s  %s\n", way.c_str(), plan.writers, seconds, rate,
                  own_files(way) ? "(separate files)" : "(one file)");
      std::fflush(stdout);
      char line[96];
      std::snprintf(line, sizeof line, "%s %d writers %.0f MB/s", way.c_str(), plan.writers, rate);
      if (own_files(way) && rate > best_files_rate) best_files_rate = rate, best_files = line;
      if (!own_files(way) && rate > best_one_rate) best_one_rate = rate, best_one = line;
    }
  }
  std::printf("verified: every measurement's sampled blocks read back right\n");
  if (best) {
    if (!best_one.empty()) std::printf("best one-file: %s\n", best_one.c_str());
    if (!best_files.empty()) std::printf("best files: %s\n", best_files.c_str());
  }
  return 0;
}
