// stop_signals.hpp: what a signal that ends the process does to a run's temporary files.
//
// Every signal whose default action ends the process and that comes from outside (SIGINT, SIGTERM,
// SIGHUP, SIGQUIT, SIGPIPE, SIGALRM, SIGUSR1/2, SIGVTALRM, SIGPROF, SIGXCPU, SIGIO, SIGPWR,
// SIGSTKFLT, the real-time signals) removes every listed temporary file and folder
// (temp_registry.hpp) before the process ends; so does a crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL,
// SIGABRT, SIGTRAP, SIGSYS), which then goes on to its previous action (a core dump, a sanitizer's
// report). SIGXFSZ (a file over `ulimit -f`) is ignored, so that the write fails with EFBIG and is
// reported like any other failed write.
//
// Only signals whose disposition is still the default are taken over: one ignored by the parent
// (nohup's SIGHUP) stays ignored, one a library handles stays the library's.
#pragma once

#include <signal.h>

namespace facegen {

enum class StopStyle {
  // One line on stderr ("facegen: interrupted (SIGINT); temporary files removed", or which path
  // could not be removed), then _exit(128 + signal).
  Message,
  // A rank of a parallel job: silent unless a path could not be removed, then the process dies of
  // the signal itself, for the launcher to see.
  DieOfSignal,
};

// Takes over the signals above (first call) and sets how the process ends (every call).
void install_stop_handlers(StopStyle style);

// std::terminate (an exception that nothing caught, a failed allocation of an exception object
// before main) removes the listed paths too and ends with one line and exit status 3.
void end_faults_in_one_line();

// Whether a progress bar is drawn on stderr's last line (a terminal): a signal's line then clears it
// first instead of following it on the same line.
void set_bar_on_stderr(bool drawn) noexcept;

// The signals that end a run from outside (the ones TempCreation holds while a file is created).
const sigset_t& stop_signal_set();

}  // namespace facegen
