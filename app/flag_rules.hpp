// flag_rules.hpp: which flags a generation run takes together. A flag the run would ignore in its
// context (its device, its latent source, its formats, one process or a parallel job) is refused, and
// so is one that contradicts another, each in one sentence naming the flag and why (UserError, exit
// 1), rather than the run going on without it. The rules of the values themselves (ranges, the
// formats a layout flag needs) stay beside their flags in main.cpp; a flag given twice is refused
// before these (common/command_line.hpp).
#pragma once

#include <cxxopts.hpp>

#include <vector>

#include "formats/output_format.hpp"

namespace facegen {

// `formats`: the run's, parsed; `parallel_job`: under mpirun or srun, or with --mpi.
void refuse_unused_flags(const cxxopts::ParseResult& args, const std::vector<OutputFormat>& formats, bool parallel_job);

// --finish-commit takes no other flag: it only finishes a commit, runs nothing, and says its one line.
void refuse_flags_beside_finish_commit(const cxxopts::ParseResult& args);

}  // namespace facegen
