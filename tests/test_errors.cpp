// test_errors.cpp: every kind of exception gets its exit status and one line, whichever reporter
// (main, or a rank of an MPI job) reads it.
#include <doctest/doctest.h>

#include <new>
#include <stdexcept>
#include <system_error>

#include "common/errors.hpp"

using namespace facegen;

namespace {

template <class Throw>
Failure failure_of(Throw throw_it) {
  try {
    throw_it();
  } catch (...) {
    return describe_current_exception();
  }
  FAIL("nothing was thrown");
  return {};
}

}  // namespace

TEST_CASE("errors: each exception's exit status and line") {
  Failure f = failure_of([] { throw UserError("bad input file x: line 3"); });
  CHECK(f.exit_code == kExitInput);
  CHECK(f.message == "bad input file x: line 3");

  f = failure_of([] { throw std::bad_alloc(); });
  CHECK(f.exit_code == kExitFault);
  CHECK(f.message == "out of host memory (try a smaller --batch)");

  // What std::thread's constructor throws when a thread's stack cannot be mapped (ulimit -v).
  for (std::errc code : {std::errc::resource_unavailable_try_again, std::errc::not_enough_memory}) {
    f = failure_of([code] { throw std::system_error(std::make_error_code(code)); });
    CHECK(f.exit_code == kExitFault);
    CHECK(f.message.rfind("out of host memory: a thread could not start (", 0) == 0);
  }

  f = failure_of([] { throw std::system_error(std::make_error_code(std::errc::io_error), "reading x"); });
  CHECK(f.exit_code == kExitFault);
  CHECK(f.message.find("reading x") != std::string::npos);

  f = failure_of([] { throw std::logic_error("stage must be 0, 1 or 2"); });
  CHECK(f.exit_code == kExitFault);
  CHECK(f.message == "stage must be 0, 1 or 2");

  f = failure_of([] { throw 42; });
  CHECK(f.exit_code == kExitFault);
  CHECK(f.message == "an exception of unknown type");
}
