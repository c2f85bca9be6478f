// dead_temporaries.hpp: the temporaries that runs of a prefix which died without a word (SIGKILL, the
// OOM killer, a node that lost power) left beside its outputs, removed by the next --resume run.
//
// A run that ends by an error or a signal it sees removes its own temporaries (temp_registry.hpp);
// SIGKILL leaves them. A run with --resume removes them before it makes anything, once it holds the
// prefix's lock (prefix_lock.hpp: no other run of the prefix is under way then) and has accepted the
// manifest's job: in the prefix's folder, each entry NAME.tmp-XXXXXX or NAME.tmp-TAG-XXXXXX (as
// temp_registry.hpp names them; TAG, a parallel job's token) whose NAME is the final name of one of
// the job's outputs' files (a shard, the PNG folder) or of its manifest, that is this user's and not
// a link. A file is removed; a folder is emptied of its PNG files and removed, and left where it holds
// anything else (remove_old_png_folder). Temporaries whose names were shortened to fit NAME_MAX are
// left: their names no longer say whose they are.
#pragma once

#include <string>
#include <vector>

#include "formats/output_format.hpp"

namespace facegen {

// The names removed, in the order found; a temporary that cannot be removed is left (the run's own
// files are checked again as they are made).
std::vector<std::string> remove_dead_temporaries(const std::string& prefix, const std::vector<OutputLayout>& layouts,
                                                 const std::string& manifest_path);

}  // namespace facegen
