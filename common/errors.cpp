// errors.cpp: one reading of an exception for every place that reports one (see errors.hpp).
#include "common/errors.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <exception>
#include <new>
#include <string>
#include <system_error>

namespace facegen {
namespace {

// The limit on this user's processes and threads where it binds this process (not root), else 0.
long long thread_limit() {
  rlimit limit{};
  if (::getuid() == 0 || ::getrlimit(RLIMIT_NPROC, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 0;
  return static_cast<long long>(limit.rlim_cur);
}

}  // namespace

Failure describe_current_exception() {
  try {
    throw;
  } catch (const UserError& e) {
    return {kExitInput, e.what()};
  } catch (const std::bad_alloc&) {
    return {kExitFault, "out of host memory (try a smaller --batch)"};
  } catch (const std::system_error& e) {
    // std::thread's constructor: EAGAIN when the stack of a new thread cannot be mapped (ulimit -v)
    // or the user may start no more processes and threads (ulimit -u, which binds all but root).
    const long long threads = thread_limit();
    if (e.code() == std::errc::resource_unavailable_try_again && threads > 0) {
      return {kExitFault, "a thread could not start: this user's processes and threads may be at their limit (ulimit -u " +
                              std::to_string(threads) + "), or memory is short (" + e.code().message() + ")"};
    }
    if (e.code() == std::errc::resource_unavailable_try_again || e.code() == std::errc::not_enough_memory) {
      return {kExitFault, std::string("out of host memory: a thread could not start (") + e.code().message() + ")"};
    }
    return {kExitFault, e.what()};
  } catch (const std::exception& e) {
    return {kExitFault, e.what()};
  } catch (...) {
    return {kExitFault, "an exception of unknown type"};
  }
}

}  // namespace facegen
