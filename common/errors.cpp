// errors.cpp: one reading of an exception for every place that reports one (see errors.hpp).
#include "common/errors.hpp"

#include <exception>
#include <new>
#include <system_error>

namespace facegen {

Failure describe_current_exception() {
  try {
    throw;
  } catch (const UserError& e) {
    return {kExitInput, e.what()};
  } catch (const std::bad_alloc&) {
    return {kExitFault, "out of host memory (try a smaller --batch)"};
  } catch (const std::system_error& e) {
    // std::thread's constructor: EAGAIN when the stack of a new thread cannot be mapped (ulimit -v)
    // or the process may start no more threads.
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
