// progress.cpp: the progress display and the peak memory figure (see progress.hpp).
#include "run/progress.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "common/clock.hpp"
#include "common/stop_signals.hpp"

namespace facegen {

namespace {

constexpr double kBarSeconds = 0.2;  // 5 redraws a second: moves visibly, costs nothing

std::string clock_text(double seconds) {
  const long long s = static_cast<long long>(seconds + 0.5);
  char text[32];
  std::snprintf(text, sizeof text, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  return text;
}

}  // namespace

bool progress_wanted(int fd, bool quiet) { return !quiet && ::isatty(fd) == 1; }

ProgressStyle progress_style_for(int fd, bool quiet) {
  if (quiet) return ProgressStyle::None;
  return ::isatty(fd) == 1 ? ProgressStyle::Bar : ProgressStyle::Lines;
}

void use_launcher_terminal(ProgressOptions& options, bool quiet) {
  const char* spec = std::getenv("FACEGEN_PROGRESS_TTY");
  if (quiet || spec == nullptr) return;
  const char* colon = std::strchr(spec, ':');
  char host[256] = {};
  if (colon == nullptr || ::gethostname(host, sizeof host - 1) != 0) return;
  if (std::string(spec, static_cast<size_t>(colon - spec)) != host) return;
  const int fd = ::open(colon + 1, O_WRONLY | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return;
  std::FILE* terminal = ::isatty(fd) == 1 ? ::fdopen(fd, "w") : nullptr;
  if (terminal == nullptr) {
    ::close(fd);
    return;
  }
  options.style = ProgressStyle::Bar;
  options.out = terminal;  // open until the process ends
}

std::string progress_line(int64_t done, int64_t total, double seconds, int width) {
  const double fraction = total > 0 ? std::min(1.0, static_cast<double>(done) / static_cast<double>(total)) : 1.0;
  const int filled = static_cast<int>(fraction * width);
  const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0.0;
  std::string line = "[" + std::string(static_cast<size_t>(filled), '#') +
                     std::string(static_cast<size_t>(width - filled), ' ') + "] ";
  char text[160];
  std::snprintf(text, sizeof text, "%lld/%lld images  %.0f images/s", static_cast<long long>(done),
                static_cast<long long>(total), rate);
  line += text;
  if (rate > 0 && done < total) line += "  ETA " + clock_text(static_cast<double>(total - done) / rate);
  return line;
}

std::string progress_log_line(int64_t done, int64_t total, double seconds) {
  const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0.0;
  const double percent = total > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0;
  char text[200];
  std::snprintf(text, sizeof text, "progress %lld/%lld images (%.0f%%), %.0f images/s, ", static_cast<long long>(done),
                static_cast<long long>(total), percent, rate);
  std::string line = text;
  line += rate > 0 && done < total ? clock_text(static_cast<double>(total - done) / rate) + " left" : "? left";
  return line + ", " + clock_text(seconds) + " elapsed";
}

ProgressDisplay::ProgressDisplay(std::FILE* out, const ProgressOptions& options, int64_t total,
                                 std::function<int64_t()> images_done)
    : out_(options.out != nullptr ? options.out : out), options_(options), total_(total), images_done_(std::move(images_done)) {
  if (options_.style == ProgressStyle::None || !images_done_) return;
  if (options_.every_seconds <= 0) options_.every_seconds = 10;
  thread_ = std::thread([this] { loop(); });
}

ProgressDisplay::~ProgressDisplay() { finish(); }

void ProgressDisplay::loop() {
  const auto start = Clock::now();
  const double interval = options_.style == ProgressStyle::Bar ? kBarSeconds : options_.every_seconds;
  std::unique_lock<std::mutex> lock(mutex_);
  for (int tick = 1;; ++tick) {
    const auto due = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(interval * tick));
    if (stop_signal_.wait_until(lock, due, [this] { return stop_; })) return;
    draw(seconds_since(start));
  }
}

void ProgressDisplay::draw(double seconds) {
  const int64_t done = images_done_();
  if (options_.style == ProgressStyle::Bar) {
    if (out_ == stderr) set_bar_on_stderr(true);
    std::fprintf(out_, "\r%s\033[K", progress_line(done, total_, seconds).c_str());
  } else {
    std::fprintf(out_, "facegen: %s\n", progress_log_line(done, total_, seconds).c_str());
  }
  std::fflush(out_);
  ++draws_;
}

void ProgressDisplay::finish() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_) return;
    stop_ = true;
  }
  stop_signal_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (options_.style == ProgressStyle::Bar && draws_ > 0) {
    std::fprintf(out_, "\r\033[K");
    std::fflush(out_);
    if (out_ == stderr) set_bar_on_stderr(false);
  }
}

int64_t peak_resident_bytes() {
  rusage usage;
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports kilobytes
}

double process_cpu_seconds() {
  rusage usage;
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

}  // namespace facegen
