// tool_options.hpp: the command-line parsing that the small tools (make-latents, make-random-network)
// share: --help prints the help, and any word that is not an option is refused.
#pragma once

#include <cstdio>
#include <optional>

#include <cxxopts.hpp>

namespace facegen {

// The parsed arguments, or nothing once --help has printed the help (the tool then exits 0). Throws
// cxxopts::exceptions::exception for a bad option or an unexpected argument.
inline std::optional<cxxopts::ParseResult> parse_tool_options(cxxopts::Options& options, int argc, char** argv) {
  cxxopts::ParseResult args = options.parse(argc, argv);
  if (args.count("help")) {
    std::printf("%s", options.help().c_str());
    return std::nullopt;
  }
  if (!args.unmatched().empty()) {
    throw cxxopts::exceptions::exception("unexpected argument '" + args.unmatched().front() + "'");
  }
  return args;
}

}  // namespace facegen
