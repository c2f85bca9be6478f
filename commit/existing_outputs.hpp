// existing_outputs.hpp: what already sits at an output's path, and whether facegen may replace it.
//
// facegen replaces only what an earlier facegen run could have written there:
//   - nothing at all;
//   - a file output (txt, bmp, npy, npy-u8, a mosaic PNG, a tar shard, the JSON summary): a regular file, not a link, that
//     is empty or begins as facegen's files of that kind begin (the signature below);
//   - a folder output (the PNG folder): a folder, not a link nor a mount point, that is empty or holds
//     only regular files named as its PNGs (000000.png, 000001.png, ... six digits or more) and
//     subfolders of the subfolders layout (000/, 001/, ... three digits or more; folders, not links
//     nor mount points) that hold only such files (formats/png_folder_layout.hpp): either layout
//     replaces either.
// Anything else (a link, a folder where a file goes, a file where a folder goes, a FIFO, a device, a
// socket, a mount point, a file of another format, a folder with other entries, in a sticky shared
// folder such as /tmp an entry of another user) is refused in one sentence before any work, and
// checked again just before the commit replaces it. Links are never followed nor replaced: an output
// named by a link is refused, so nothing is ever written through one.
//
// The signatures (the first bytes of each kind):
//   Text         a decimal image count, "\n", then a value's first character ('-' or a digit)
//   Bmp          "BM", the file's own size at offset 2, the pixels at offset 54, 24 bits per pixel
//   Npy          NumPy's magic "\x93NUMPY" and a header naming a shape (N, S, S, C), S 32, 64 or 128
//   NpyU8        NumPy's magic, 'descr': '|u1' and a shape (N, S, S, 3)
//   Tar          "ustar\0" at offset 257: the ustar magic of its first member's header
//   Png          the PNG signature, then the IHDR chunk
//   SummaryJson  the summary's first key: {\n  "program": {
#pragma once

#include <string>

#include "formats/output_format.hpp"

namespace facegen {

enum class WrittenKind { Text, Bmp, Npy, Png, PngFolder, SummaryJson, NpyU8, Tar };

// What a format puts at each of its final paths (mosaic-png: Png; png: PngFolder).
WrittenKind written_kind(OutputFormat format);
const char* written_kind_name(WrittenKind kind);  // "text output", "PNG folder", ... for messages

// Whether the name is one of the PNG folder's files: six digits or more (an index), or "seed" and
// four or more (a seed), then ".png".
bool is_png_file_name(const std::string& name);

// Why the entry `name` of the directory `dir_fd` may not be replaced by an output of `kind`, as the
// end of a sentence ("is a symbolic link, and facegen never writes through or over links"), or ""
// when nothing is there or facegen wrote it.
std::string why_not_replaceable(int dir_fd, const std::string& name, WrittenKind kind);

// The same by path; throws UserError, one sentence naming the path and `flag` (the flag that named
// it, "--output" or "--summary-json"), when it may not be replaced. A folder that cannot be opened
// holds nothing to replace: creating the output there says why it cannot be.
void require_replaceable(const std::string& path, WrittenKind kind, const std::string& flag);

// Removes an old PNG folder that a commit has taken the place of (now at `name` in `dir_fd`): its
// PNG files and its subfolders' (each subfolder then), then the folder. Anything else that appeared
// in it is left with the folder; returns "" when the folder is gone, else why it was left (for a warning).
std::string remove_old_png_folder(int dir_fd, const std::string& name);

// Why the entry `name` of a PNG folder `folder_fd` may not be (or become) one of its subfolders, as
// the end of a sentence, or "" when nothing is there or it is a folder (its files are checked each).
std::string why_not_png_subfolder(int folder_fd, const std::string& name);

}  // namespace facegen
