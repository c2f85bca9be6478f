// folder_files.hpp: the files of a folder of PNGs on the file system (png_folder_layout.hpp says where
// each lies): created relative to the folder's held descriptor, so that a file costs one openat, one
// write and one close and no walk of the folder's path; and, with --resume, a group of them moved from
// the temporary folder into the final one.
//
// A subfolder is made by the first file that needs it (mkdirat; a writer that loses the race to another
// finds it made). The caller holds a TempCreation (temp_registry.hpp) around a run of files, so that a
// signal's cleanup of the registered temporary folder waits for the files being created; each file
// takes one of its own too, which costs nothing inside the caller's.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "formats/png_folder_layout.hpp"

namespace facegen {

// The threads that write one run of a folder's PNGs (of `threads`, the run's): every file created in
// one folder waits for that folder's lock, and threads that wait for it spin. FACEGEN_PNG_WRITERS=K
// sets it (measurements: bench/job_profile.sh).
int png_folder_writers(PngLayout layout, int threads);

// Creates `relative` ("000042.png" or "000/000042.png") in the folder `dir_fd` (truncating a file of
// that name) and writes `bytes` into it. Throws UserError naming `shown`, the file's final path.
void write_file_in_folder(int dir_fd, const std::string& relative, const std::string& shown, std::string_view bytes);

// Moves the files `relatives` from the folder `temp_fd` to the same places in `final_fd` (whose path
// is `final_folder`, for messages), making the subfolders missing there, each first checked as the
// commit checks what it replaces (existing_outputs.hpp); then syncs every folder changed. Throws
// UserError.
void move_into_folder(int temp_fd, const std::string& temp_folder, int final_fd, const std::string& final_folder,
                      const std::vector<std::string>& relatives);

// Removes the folder `path` that moves left empty: its empty subfolders, then itself. False with errno
// set where something is left in it.
bool remove_emptied_folder(const std::string& path);

}  // namespace facegen
