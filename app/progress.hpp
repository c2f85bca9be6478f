// progress.hpp: the progress bar on stderr (images done, images/s, ETA) and the peak memory figure.
//
// The bar is drawn only where a person watches: stderr is a terminal and --quiet was not given. It
// redraws one line in place ("\r"), at most 10 times a second, and clears it when the run ends, so the
// summary that follows is not interleaved with it.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

namespace facegen {

bool progress_wanted(int fd, bool quiet);  // fd is a terminal and not quiet

// One line of the bar for `done` of `total` images after `seconds`, `width` characters of bar.
std::string progress_line(int64_t done, int64_t total, double seconds, int width = 30);

class ProgressBar {
 public:
  ProgressBar(std::FILE* out, bool enabled);  // the clock starts here
  void update(int64_t done, int64_t total);  // from any thread; redraws when 0.1 s passed since the last draw
  void finish();              // clears the line; later updates draw nothing

 private:
  using Clock = std::chrono::steady_clock;
  std::FILE* out_;
  bool enabled_;
  Clock::time_point start_;
  Clock::time_point last_draw_;
  bool drawn_ = false;
  std::mutex mutex_;
};

int64_t peak_resident_bytes();  // the process's peak resident set size so far (getrusage)

}  // namespace facegen
