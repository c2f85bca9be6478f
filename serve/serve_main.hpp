// serve_main.hpp: `facegen serve`: the HTTP service over a warm generator (docs/service.md).
#pragma once

#include <string>

namespace facegen::serve {

// argv[0] is "serve"; `default_model`: the shipped model's path. Returns the exit status: 0 after a
// clean stop (SIGTERM, SIGINT, SIGHUP), 1 bad input (a flag's value, the model, a port that cannot
// be bound), 2 a malformed command line, 3 a fault (no GPU for --device cuda, ...).
int serve_main(int argc, char** argv, const std::string& default_model);

}  // namespace facegen::serve
