// stack_room.cpp: the stack limit raised where it is too small for the program (stack_room.hpp).
#include "common/stack_room.hpp"

#include <pthread.h>
#include <sys/resource.h>

#include <algorithm>
#include <string>

#include "common/errors.hpp"

namespace facegen {
namespace {

std::string kib(uint64_t bytes) { return std::to_string(bytes >> 10) + " KiB"; }

// Threads created from now on: stacks of `bytes` where glibc's default (sized from the limit at
// start-up) is under kStackNeededBytes.
void raise_thread_stacks(uint64_t bytes) {
  pthread_attr_t attr;
  if (::pthread_getattr_default_np(&attr) != 0) return;
  size_t size = 0;
  if (::pthread_attr_getstacksize(&attr, &size) == 0 && size < kStackNeededBytes &&
      ::pthread_attr_setstacksize(&attr, static_cast<size_t>(bytes)) == 0) {
    ::pthread_setattr_default_np(&attr);
  }
  ::pthread_attr_destroy(&attr);
}

}  // namespace

void ensure_stack_room() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_STACK, &limit) != 0) return;
  uint64_t room = limit.rlim_cur == RLIM_INFINITY ? kStackWantedBytes : limit.rlim_cur;
  if (room < kStackWantedBytes) {
    const uint64_t most = limit.rlim_max == RLIM_INFINITY ? kStackWantedBytes : limit.rlim_max;
    rlimit raised = limit;
    raised.rlim_cur = static_cast<rlim_t>(std::min(kStackWantedBytes, std::max<uint64_t>(most, room)));
    if (raised.rlim_cur > limit.rlim_cur && ::setrlimit(RLIMIT_STACK, &raised) == 0) room = raised.rlim_cur;
    if (room < kStackNeededBytes) {
      throw UserError("the stack size limit (ulimit -s) is " + kib(limit.rlim_cur) + " and may not be raised past " +
                      kib(most) + ", but facegen needs " + kib(kStackNeededBytes) + ": raise it (ulimit -s 8192)");
    }
  }
  raise_thread_stacks(std::min(room, kStackWantedBytes));
}

}  // namespace facegen
