// profile_skip.cpp: FACEGEN_PROFILE_SKIP (see profile_skip.hpp).
#include "engine/profile_skip.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace facegen {

ProfileSkip profile_skip() {
  static const ProfileSkip skip = [] {
    const char* text = std::getenv("FACEGEN_PROFILE_SKIP");
    const std::string value = text != nullptr ? text : "";
    const ProfileSkip chosen = value == "writes" ? ProfileSkip::Writes : value == "files" ? ProfileSkip::Files
                                                                                          : ProfileSkip::None;
    if (chosen != ProfileSkip::None) {
      std::fprintf(stderr, "facegen: warning: FACEGEN_PROFILE_SKIP=%s: the outputs' bytes are not written (a "
                   "profile's run; the files put in place are not the images)\n", value.c_str());
    }
    return chosen;
  }();
  return skip;
}

}  // namespace facegen
