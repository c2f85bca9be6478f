// profile_skip.hpp: FACEGEN_PROFILE_SKIP, a profile's way to leave the last stage of a job out, so that
// what it costs is the difference between two runs (bench/job_profile.sh):
//   writes  no byte is written into the output files (every file is still created, sized, synced and
//           put in place: empty, or holes where its bytes would be)
//   files   the same, and a folder's files (PNGs) are not even created
// The outputs are then not what the run made: the first file that skips says so on stderr, once.
#pragma once

namespace facegen {

enum class ProfileSkip { None, Writes, Files };

ProfileSkip profile_skip();  // FACEGEN_PROFILE_SKIP, read once; warns once where set

}  // namespace facegen
