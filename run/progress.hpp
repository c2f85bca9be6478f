// progress.hpp: how far a run is, shown by time rather than by chunk, on stderr.
//
// A thread of its own asks a counter (images generated so far) for its value and draws:
//   Bar   (stderr is a terminal): one line redrawn in place ("\r") 5 times a second, with images
//         done, images/s and the time left; cleared when the run ends, before the summary.
//   Lines (stderr is a file or a pipe, e.g. a Slurm log): one plain line every `every_seconds`
//         (10 s by default), the first after that long, so a short run prints none.
//   None  (--quiet): nothing.
// The counter is whatever the driver gives: an atomic the backend adds to after each pass (single
// process), or the sum over the ranks of an MPI job (mpi/job_progress.hpp). Reading it costs the
// workers nothing.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace facegen {

enum class ProgressStyle { None, Bar, Lines };

struct ProgressOptions {
  ProgressStyle style = ProgressStyle::None;
  double every_seconds = 10;    // Lines: the interval
  std::FILE* out = nullptr;     // where to draw; nullptr: stderr
};

// Bar where `fd` is a terminal, Lines otherwise, None when quiet.
ProgressStyle progress_style_for(int fd, bool quiet);
// An MPI rank's stderr is a pipe to its launcher, so run_parallel.sh, when its own stderr is a
// terminal, names it in FACEGEN_PROGRESS_TTY=HOST:PATH. On that host this opens PATH and sets a Bar
// drawn there; elsewhere (or unset, or --quiet) it leaves `options` as they are.
void use_launcher_terminal(ProgressOptions& options, bool quiet);
bool progress_wanted(int fd, bool quiet);  // fd is a terminal and not quiet

// The bar: "[####    ] 250/1000 images  125 images/s  ETA 0:00:06", `width` characters of bar.
std::string progress_line(int64_t done, int64_t total, double seconds, int width = 30);
// A log line: "progress 250/1000 images (25%), 125 images/s, 0:00:06 left, 0:00:02 elapsed".
std::string progress_log_line(int64_t done, int64_t total, double seconds);

class ProgressDisplay {
 public:
  // Starts drawing at once (the clock starts here); `images_done` is called from the display's thread.
  ProgressDisplay(std::FILE* out, const ProgressOptions& options, int64_t total,
                  std::function<int64_t()> images_done);
  ~ProgressDisplay();  // finish()
  ProgressDisplay(const ProgressDisplay&) = delete;
  ProgressDisplay& operator=(const ProgressDisplay&) = delete;

  void finish();  // stops the thread and clears the bar; idempotent
  int draws() const { return draws_; }  // how many times it drew (for tests)

 private:
  void loop();
  void draw(double seconds);

  std::FILE* out_;
  ProgressOptions options_;
  int64_t total_;
  std::function<int64_t()> images_done_;
  std::mutex mutex_;
  std::condition_variable stop_signal_;
  bool stop_ = false;
  int draws_ = 0;
  std::thread thread_;
};

int64_t peak_resident_bytes();  // the process's peak resident set size so far (getrusage)
double process_cpu_seconds();   // CPU time of every thread of the process so far, user and system (getrusage)

}  // namespace facegen
