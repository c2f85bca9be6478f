// bench_small_files.hpp: the folder-of-PNGs ways of facegen-bench-write: writers that create, write and
// close small files (one 64 x 64 PNG: 12,711 bytes stored), through facegen's own folder writer
// (engine/output_files.hpp), with one syncfs at the end inside the timing.
//
// The files are cut into runs of 1,000 (a subfolder's worth, as the output engine hands out pieces);
// the writers go in groups of `group`, each group taking the next run and its members taking grains of
// 32 files of it from a shared counter (as a run's parallel loop does). Ways:
//   pngs-path  each file opened by its whole path, a TempCreation a file: facegen's former writer
//   pngs-flat  OutputFiles::write_in_folder into one folder: openat on the held folder, a TempCreation
//              around each grain
//   pngs-sub   the same in the subfolders layout (formats/png_folder_layout.hpp)
//   pngs-own   each writer a flat folder of its own: the ceiling of separate folders
// After each measurement 64 files spread over the folder are read back and compared.
#pragma once

#include <cstdint>
#include <string>

namespace bench {

struct SmallFilesPlan {
  std::string dir;
  std::string way;
  int64_t files = 65536;
  int64_t file_bytes = 12711;
  int writers = 1;
  int group = 1;  // writers per run
};

struct SmallFilesResult {
  double seconds = 0;
  double user_us_per_file = 0;    // the process's CPU time, per file
  double system_us_per_file = 0;
  bool verified = false;
  std::string mismatch;           // the first file that read back wrong
};

bool is_small_files_way(const std::string& way);
SmallFilesResult measure_small_files(const SmallFilesPlan& plan);

}  // namespace bench
