// test_threads.cpp: the CPU count a process was given follows its affinity mask and the variables
// that schedulers set, whichever is smallest; --threads (resolve_threads(n > 0)) overrides all.
// ThreadShare covers every item exactly once, call after call, from several callers, nested, and
// passes a body's exception back.
#include <doctest/doctest.h>

#include <sched.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/threads.hpp"
#include "common/work_pool.hpp"
#include "common/threads.hpp"

namespace {

// Sets the process's affinity and the two variables for the test's duration, then puts them back.
struct GivenCpus {
  cpu_set_t saved;
  GivenCpus() {
    REQUIRE(sched_getaffinity(0, sizeof saved, &saved) == 0);
    unsetenv("SLURM_CPUS_PER_TASK");
    unsetenv("OMP_NUM_THREADS");
  }
  ~GivenCpus() {
    sched_setaffinity(0, sizeof saved, &saved);
    unsetenv("SLURM_CPUS_PER_TASK");
    unsetenv("OMP_NUM_THREADS");
  }
  int first_allowed() const {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &saved)) return cpu;
    return 0;
  }
};

}  // namespace

TEST_CASE("threads: one CPU in the affinity mask gives one thread") {
  GivenCpus given;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(given.first_allowed(), &one);
  REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
  std::string why;
  CHECK(facegen::available_cpus(&why) == 1);
  CHECK(why == "the CPU affinity mask");
  CHECK(facegen::resolve_threads(0) == 1);
  CHECK(facegen::resolve_threads(3) == 3);  // an explicit --threads wins
}

TEST_CASE("threads: OMP_NUM_THREADS and SLURM_CPUS_PER_TASK lower the count, never raise it") {
  GivenCpus given;
  const int all = facegen::available_cpus();
  setenv("OMP_NUM_THREADS", "1", 1);
  std::string why;
  CHECK(facegen::available_cpus(&why) == 1);
  CHECK(why == "OMP_NUM_THREADS=1");
  unsetenv("OMP_NUM_THREADS");
  setenv("SLURM_CPUS_PER_TASK", "1", 1);
  CHECK(facegen::available_cpus() == 1);
  setenv("SLURM_CPUS_PER_TASK", "100000", 1);
  CHECK(facegen::available_cpus() == all);
  for (const char* bad : {"", "0", "-2", "two", "3x"}) {
    setenv("SLURM_CPUS_PER_TASK", bad, 1);
    CHECK(facegen::available_cpus() == all);
  }
  CHECK(all >= 1);
  CHECK(all <= static_cast<int>(std::thread::hardware_concurrency()));
}

namespace {

// Runs count items through the pool and checks each was visited once, in ranges inside [0, count).
void check_covers(facegen::ThreadShare& pool, int64_t count) {
  std::vector<std::atomic<int>> visits(count);
  std::atomic<int> bad_ranges{0};
  pool.parallel_for(count, [&](int64_t begin, int64_t end) {
    if (begin < 0 || end > count || begin >= end) ++bad_ranges;
    for (int64_t i = begin; i < end; ++i) ++visits[i];
  });
  int64_t wrong = 0;
  for (auto& v : visits) wrong += v.load() != 1;
  INFO("count " << count << ", pool of " << pool.size());
  CHECK(bad_ranges == 0);
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("ThreadShare: every item once, for many calls in a row and any pool size") {
  for (int threads : {1, 2, 3, 7}) {
    facegen::ThreadShare pool(threads);
    CHECK(pool.size() == threads);
    for (int64_t count : {0, 1, 2, 3, 17, 1000, 100003}) check_covers(pool, count);
    for (int call = 0; call < 2000; ++call) check_covers(pool, 1 + call % 37);
  }
}

TEST_CASE("ThreadShare: callers on several threads at once, and nested calls") {
  facegen::ThreadShare pool(3);
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&pool, c] {
      for (int call = 0; call < 200; ++call) check_covers(pool, 50 + c);
    });
  for (auto& t : callers) t.join();
  std::atomic<int64_t> inner{0};
  pool.parallel_for(8, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      pool.parallel_for(10, [&](int64_t b, int64_t e) { inner += e - b; });
  });
  CHECK(inner == 80);
}

TEST_CASE("ThreadShare: a body's exception reaches the caller, and the pool works afterwards") {
  facegen::ThreadShare pool(3);
  CHECK_THROWS_WITH_AS(pool.parallel_for(1000,
                                         [](int64_t begin, int64_t end) {
                                           if (begin <= 500 && 500 < end)
                                             throw std::runtime_error("item 500");
                                         }),
                       "item 500", std::runtime_error);
  check_covers(pool, 1000);
}

TEST_CASE("WorkPool: loops, nested loops and posted tasks start no thread after the pool's own") {
  facegen::WorkPool& pool = facegen::WorkPool::process();
  facegen::parallel_for(4, 0, [](int64_t, int64_t) {});  // the pool exists from here on
  const int64_t started = facegen::WorkPool::threads_started();
  std::atomic<int64_t> items{0};
  for (int call = 0; call < 500; ++call) {
    facegen::parallel_for(64, 0, [&](int64_t begin, int64_t end) {
      facegen::parallel_for(end - begin, 0, [&](int64_t b, int64_t e) { items += e - b; });
    });
  }
  CHECK(items == 500 * 64);
  std::mutex mutex;
  std::condition_variable done;
  int left = 1000;
  for (int t = 0; t < 1000; ++t) {
    pool.post([&] {
      std::lock_guard<std::mutex> lock(mutex);
      if (--left == 0) done.notify_all();
    });
  }
  std::unique_lock<std::mutex> lock(mutex);
  REQUIRE(done.wait_for(lock, std::chrono::seconds(30), [&] { return left == 0; }));
  CHECK(facegen::WorkPool::threads_started() == started);
}

TEST_CASE("WorkPool: a task that runs a loop is helped, and loops wait for no task") {
  facegen::WorkPool pool(3);
  std::atomic<int64_t> sum{0};
  std::mutex mutex;
  std::condition_variable done;
  int left = 6;
  for (int t = 0; t < 6; ++t) {
    pool.post([&] {
      pool.parallel_for(1000, 4, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) sum += i;
      });
      std::lock_guard<std::mutex> lock(mutex);
      if (--left == 0) done.notify_all();
    });
  }
  // A loop of the caller's own finishes while tasks are queued (the caller alone could finish it).
  std::atomic<int64_t> mine{0};
  pool.parallel_for(100, 4, [&](int64_t begin, int64_t end) { mine += end - begin; });
  CHECK(mine == 100);
  std::unique_lock<std::mutex> lock(mutex);
  REQUIRE(done.wait_for(lock, std::chrono::seconds(30), [&] { return left == 0; }));
  CHECK(sum == 6 * (999 * 1000 / 2));
}
