// progress.cpp: the progress bar and the peak memory figure (see progress.hpp).
#include "app/progress.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>

namespace facegen {

bool progress_wanted(int fd, bool quiet) { return !quiet && ::isatty(fd) == 1; }

std::string progress_line(int64_t done, int64_t total, double seconds, int width) {
  const double fraction = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
  const int filled = static_cast<int>(fraction * width);
  const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0.0;
  std::string line = "[" + std::string(static_cast<size_t>(filled), '#') +
                     std::string(static_cast<size_t>(width - filled), ' ') + "] ";
  char text[160];
  std::snprintf(text, sizeof text, "%lld/%lld images  %.0f images/s", static_cast<long long>(done),
                static_cast<long long>(total), rate);
  line += text;
  if (rate > 0 && done < total) {
    const long long eta = static_cast<long long>(static_cast<double>(total - done) / rate + 0.5);
    std::snprintf(text, sizeof text, "  ETA %lld:%02lld:%02lld", eta / 3600, eta / 60 % 60, eta % 60);
    line += text;
  }
  return line;
}

ProgressBar::ProgressBar(std::FILE* out, bool enabled)
    : out_(out), enabled_(enabled), start_(Clock::now()), last_draw_(start_) {}

void ProgressBar::update(int64_t done, int64_t total) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const auto now = Clock::now();
  if (drawn_ && now - last_draw_ < std::chrono::milliseconds(100) && done < total) return;
  last_draw_ = now;
  drawn_ = true;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  std::fprintf(out_, "\r%s\033[K", progress_line(done, total, seconds).c_str());
  std::fflush(out_);
}

void ProgressBar::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (enabled_ && drawn_) {
    std::fprintf(out_, "\r\033[K");
    std::fflush(out_);
  }
  enabled_ = false;
}

int64_t peak_resident_bytes() {
  rusage usage;
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports kilobytes
}

}  // namespace facegen
