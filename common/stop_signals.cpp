// stop_signals.cpp: the handlers of the signals that end a run (see stop_signals.hpp).
//
// The handler is async-signal-safe: it removes the listed temporary paths, builds its one line in a
// buffer on its stack, write()s it and ends the process. It runs once: a second signal in another
// thread parks that thread, a crash inside the handler goes straight to its default action.
#include "common/stop_signals.hpp"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>

#include "common/temp_registry.hpp"

namespace facegen {
namespace {

struct SignalName {
  int number;
  const char* name;
};

// Default action "terminate", sent from outside. SIGXFSZ is apart (ignored, see the header).
constexpr SignalName kStopSignals[] = {
    {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},       {SIGQUIT, "SIGQUIT"}, {SIGPIPE, "SIGPIPE"},
    {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"},     {SIGUSR1, "SIGUSR1"}, {SIGUSR2, "SIGUSR2"},
    {SIGXCPU, "SIGXCPU"}, {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGIO, "SIGIO"},
    {SIGPWR, "SIGPWR"},   {SIGSTKFLT, "SIGSTKFLT"},
};
// A fault of the program itself: cleaned up after, then left to its previous action.
constexpr SignalName kCrashSignals[] = {
    {SIGSEGV, "SIGSEGV"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"}, {SIGILL, "SIGILL"},
    {SIGABRT, "SIGABRT"}, {SIGTRAP, "SIGTRAP"}, {SIGSYS, "SIGSYS"},
};

constexpr int kSignalSlots = 65;
struct sigaction g_previous[kSignalSlots];  // crash signals: what to do after the cleanup
bool g_is_crash[kSignalSlots] = {};
std::atomic<int> g_style{static_cast<int>(StopStyle::Message)};
std::atomic<bool> g_handling{false};
std::atomic<bool> g_bar_on_stderr{false};  // a progress bar is drawn on stderr's last line
int g_rt_min = 0;  // SIGRTMIN, read once (glibc computes it)
std::once_flag g_installed;

// A line built without allocation.
struct Line {
  char text[4600];
  size_t length = 0;
  void add(const char* s) {
    while (*s != '\0' && length + 1 < sizeof text) text[length++] = *s++;
  }
  void add_number(long value) {
    char digits[24];
    int n = 0;
    do {
      digits[n++] = static_cast<char>('0' + value % 10);
      value /= 10;
    } while (value > 0 && n < 23);
    while (n > 0 && length + 1 < sizeof text) text[length++] = digits[--n];
  }
  void write_to_stderr() {
    add("\n");
    ssize_t ignored = ::write(STDERR_FILENO, text, length);  // EPIPE when stderr's reader is gone
    (void)ignored;
  }
};

void add_signal_name(Line& line, int signal_number) {
  for (const SignalName& s : kStopSignals) {
    if (s.number == signal_number) return line.add(s.name);
  }
  for (const SignalName& s : kCrashSignals) {
    if (s.number == signal_number) return line.add(s.name);
  }
  line.add("SIGRTMIN+");
  line.add_number(signal_number - g_rt_min);
}

void add_cleanup_result(Line& line, int failures, const char* first_failure) {
  if (failures == 0) return line.add("; temporary files removed");
  line.add("; could not remove temporary ");
  line.add(first_failure);
  if (failures > 1) {
    line.add(" and ");
    line.add_number(failures - 1);
    line.add(" more");
  }
}

// Restores the action the signal had before ours and has it act: a crash's default (a core) or a
// sanitizer's report; the signal is blocked while the handler runs, so raise() takes effect when the
// handler returns (a fault re-executes its instruction and raises it again anyway).
void act_as_before(int signal_number) {
  if (g_is_crash[signal_number]) {
    ::sigaction(signal_number, &g_previous[signal_number], nullptr);
  } else {
    struct sigaction default_action;
    std::memset(&default_action, 0, sizeof default_action);
    default_action.sa_handler = SIG_DFL;
    sigemptyset(&default_action.sa_mask);
    ::sigaction(signal_number, &default_action, nullptr);
  }
  ::raise(signal_number);
}

extern "C" void on_ending_signal(int signal_number) {
  if (g_handling.exchange(true)) {
    if (g_is_crash[signal_number]) return act_as_before(signal_number);  // a crash in the cleanup
    for (;;) ::pause();  // another thread is cleaning up and ends the process
  }
  const char* first_failure = nullptr;
  const int failures = remove_registered_temps(&first_failure);
  const bool crash = g_is_crash[signal_number];
  const auto style = static_cast<StopStyle>(g_style.load());
  if (style == StopStyle::Message || crash || failures > 0) {
    Line line;
    if (g_bar_on_stderr.load()) line.add("\r\033[K");  // over the bar, not after it (Ctrl-C at a terminal)
    line.add(crash ? "facegen: fault: crashed (" : signal_number == SIGINT ? "facegen: interrupted (" : "facegen: terminated (");
    add_signal_name(line, signal_number);
    line.add(")");
    if (!crash && outputs_committed()) line.add(" after its outputs were in place");
    add_cleanup_result(line, failures, first_failure);
    line.write_to_stderr();
  }
  if (crash || style == StopStyle::DieOfSignal) return act_as_before(signal_number);
  ::_exit(128 + signal_number);
}

}  // namespace

void set_bar_on_stderr(bool drawn) noexcept { g_bar_on_stderr.store(drawn); }

namespace {

void take_over_if_default(int signal_number, const struct sigaction& ours) {
  struct sigaction current;
  if (::sigaction(signal_number, nullptr, &current) != 0) return;
  const bool has_handler = (current.sa_flags & SA_SIGINFO) != 0 || current.sa_handler != SIG_DFL;
  if (has_handler) return;  // ignored by our parent, or a library's
  g_previous[signal_number] = current;
  ::sigaction(signal_number, &ours, nullptr);
}

void install_once() {
  g_rt_min = SIGRTMIN;
  struct sigaction ours;
  std::memset(&ours, 0, sizeof ours);
  ours.sa_handler = on_ending_signal;
  ours.sa_mask = stop_signal_set();  // one handler at a time in a thread
  for (const SignalName& s : kStopSignals) take_over_if_default(s.number, ours);
  for (int n = SIGRTMIN; n <= SIGRTMAX; ++n) take_over_if_default(n, ours);
  for (const SignalName& s : kCrashSignals) {
    g_is_crash[s.number] = true;
    take_over_if_default(s.number, ours);
  }

  struct sigaction current;
  if (::sigaction(SIGXFSZ, nullptr, &current) == 0 && (current.sa_flags & SA_SIGINFO) == 0 &&
      current.sa_handler == SIG_DFL) {
    std::signal(SIGXFSZ, SIG_IGN);
  }
}

[[noreturn]] void on_terminate() noexcept {
  const char* first_failure = nullptr;
  const int failures = remove_registered_temps(&first_failure);
  Line line;
  line.add("facegen: fault: ");
  if (std::exception_ptr error = std::current_exception()) {
    try {
      std::rethrow_exception(error);
    } catch (const std::bad_alloc&) {
      line.add("out of host memory");
    } catch (const std::exception& e) {
      line.add(e.what());
    } catch (...) {
      line.add("an exception of unknown type");
    }
  } else {
    // What the C++ runtime does when it cannot even allocate an exception (the static objects of
    // the command-line parser, under ulimit -v), or a bug such as a thread left running.
    line.add("out of host memory, or an internal error (std::terminate)");
  }
  add_cleanup_result(line, failures, first_failure);
  line.write_to_stderr();
  ::_exit(3);  // kExitFault
}

}  // namespace

void end_faults_in_one_line() { std::set_terminate(on_terminate); }

void install_stop_handlers(StopStyle style) {
  g_style.store(static_cast<int>(style));
  std::call_once(g_installed, install_once);
}

const sigset_t& stop_signal_set() {
  static const sigset_t set = [] {
    sigset_t signals;
    sigemptyset(&signals);
    for (const SignalName& s : kStopSignals) sigaddset(&signals, s.number);
    for (int n = SIGRTMIN; n <= SIGRTMAX; ++n) sigaddset(&signals, n);
    return signals;
  }();
  return set;
}

}  // namespace facegen
