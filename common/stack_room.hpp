// stack_room.hpp: enough stack for the program, whatever `ulimit -s` the user's shell or batch
// system set.
//
// The main thread's stack may grow only to the soft RLIMIT_STACK, and glibc sizes every thread's
// default stack from that limit as it was when the process started. The program's deepest paths
// (a model read through a 64 KiB buffer, the CPU kernels' tiles) need far less than 1 MiB, but
// under `ulimit -s 64` a run died of SIGSEGV in the model's loader, and where the overflow came
// after the outputs were opened it left their temporary files behind (a handler cannot run on a
// stack that has overflowed).
#pragma once

#include <cstdint>

namespace facegen {

constexpr uint64_t kStackNeededBytes = uint64_t{1} << 20;  // the least the program runs with
constexpr uint64_t kStackWantedBytes = uint64_t{8} << 20;  // Linux's usual limit

// Before any thread starts: a soft stack limit under kStackWantedBytes is raised toward it, as far
// as the hard limit allows; threads created from now on get stacks of the main thread's limit
// (kStackNeededBytes to kStackWantedBytes) where glibc's default is under kStackNeededBytes. Throws UserError, in
// one sentence naming `ulimit -s`, when the hard limit is under kStackNeededBytes.
void ensure_stack_room();

}  // namespace facegen
