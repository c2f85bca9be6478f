// command_line.hpp: what the program and the service say of a command line that cxxopts parsed or
// could not: one sentence in the house style, naming the flag, for each of cxxopts' refusals, and a
// flag given more than once refused rather than silently taking its last value.
#pragma once

#include <cxxopts.hpp>

#include <string>
#include <vector>

namespace facegen {

// "--NAME" for a long flag's name, "-N" for a one-letter one (as cxxopts reports them, without dashes).
std::string flag_text(const std::string& name);

// cxxopts' refusal as one sentence: "unknown flag --bogus", "--output needs a value", "--quiet takes no
// value, got 'x'", "'---x' is not a flag"; anything else as cxxopts words it.
std::string command_line_problem(const cxxopts::exceptions::exception& e);

// Throws UserError for the first flag given more than once, naming it and both values: "--output is
// given twice ('a', then 'b'); give it once" (a flag without a value: "--quiet is given twice; ...").
// `may_repeat`: long names of flags that are lists by repetition (the service's --model NAME=PATH).
void refuse_repeated_flags(const cxxopts::ParseResult& args, const std::vector<std::string>& may_repeat = {});

}  // namespace facegen
