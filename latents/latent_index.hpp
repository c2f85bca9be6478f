// latent_index.hpp: where each token of a latent text file starts, from a coarse map of fixed size.
//
// The file's bytes are cut into kBlocks blocks of equal size (the last ones may be empty). For each
// block the map holds three counts: the tokens that start in it, its newlines, and the offset of its
// last newline (plus one; 0 when it has none). From these, the byte offset, line and column of token
// t (token 0 is N, token 1 + 100 i + v is value v of image i) are found by a binary search over the
// blocks and a scan of one block, at most file size / kBlocks bytes. The map is kBlocks * 3 integers
// whatever N is. It is built in parts so that several processes can share the work: part p of P counts
// its own contiguous blocks and leaves the others zero, and the element-wise sum of all parts (an
// MPI_Allreduce, or a loop in one process) is the whole map.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "latents/input_file.hpp"

namespace facegen {

struct TextPosition {
  int64_t offset = 0;  // byte offset of the token's first byte (the file size past the last token)
  int64_t line = 1;    // 1-based, as in messages
  int64_t column = 1;  // 1-based, in bytes
};

class LatentIndex {
 public:
  static constexpr int kBlocks = 4096;
  static constexpr int kFields = 3;  // per block: token starts, newlines, last newline offset + 1

  // Counts part `part` of `parts` of the blocks of `file` (a regular file, its size at the open) with
  // `threads` threads: kBlocks * kFields integers, zero outside this part. Throws UserError if the file
  // cannot be read or changed.
  static std::vector<int64_t> count_part(const InputFile& file, int part, int parts, int threads);

  // The whole map of `file`: the sum of every part's counts. locate() reads the file's one descriptor.
  LatentIndex(std::shared_ptr<const InputFile> file, std::vector<int64_t> counts);

  int64_t tokens() const { return tokens_before_.back(); }  // in the whole file, N included
  // Where token `token` starts; past the last token, the end of the file (where a reader finds it ends).
  TextPosition locate(int64_t token) const;

 private:
  int64_t block_begin(int64_t block) const;

  std::shared_ptr<const InputFile> file_;
  int64_t file_size_;
  std::vector<int64_t> tokens_before_;    // (kBlocks + 1): tokens starting before each block
  std::vector<int64_t> lines_before_;     // (kBlocks + 1): newlines before each block
  std::vector<int64_t> newline_before_;   // (kBlocks + 1): offset of the last newline before it, or -1
};

}  // namespace facegen
