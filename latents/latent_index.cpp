// latent_index.cpp: the coarse token map of a latent text file (see latent_index.hpp).
//
// Blocks are read with pread through a buffer of at most 1 MiB, so any thread can count or scan any
// block of the file's one shared descriptor (input_file.hpp). A token starts at a byte that is not white space and follows white
// space or the start of the file, the same rule as the reader's (is_latent_space).
#include "latents/latent_index.hpp"


#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "common/errors.hpp"
#include "latents/input_file.hpp"
#include "common/threads.hpp"
#include "latents/latents.hpp"

namespace facegen {
namespace {

constexpr int64_t kScanBytes = int64_t{1} << 20;

// Whether the byte before `offset` separates tokens (true at the start of the file).
bool space_before(const InputFile& file, int64_t offset) {
  if (offset == 0) return true;
  char c;
  file.read_at(offset - 1, 1, &c);
  return is_latent_space(c);
}

int64_t block_begin_of(int64_t block, int64_t file_size) {
  return block * file_size / LatentIndex::kBlocks;  // file_size < 2^63 / kBlocks for any real file
}

// Whether byte c separates tokens: is_latent_space written so that a loop of it vectorises
// (' ', and '\t' '\n' '\v' '\f' '\r', which are 9 to 13).
inline uint32_t space_bit(unsigned char c) { return (c == ' ') | (static_cast<unsigned char>(c - 9) < 5); }

// Counts blocks [first, last) in one pass over their bytes: per block kFields integers into
// counts[block * kFields ...]: token starts, newlines, last newline offset + 1 (0: none). Each byte is
// compared with the one before it, without a dependency from one byte to the next, so that the
// compiler vectorises the count and it runs several times faster than parsing.
void count_blocks(const InputFile& file, int64_t first, int64_t last, int64_t file_size, int64_t* counts) {
  const int64_t begin = block_begin_of(first, file_size), end = block_begin_of(last, file_size);
  std::vector<unsigned char> buffer(static_cast<size_t>(std::min(kScanBytes, std::max<int64_t>(1, end - begin))));
  unsigned char before = space_before(file, begin) ? ' ' : 'x';
  int64_t filled_begin = begin, filled_end = begin;  // buffer holds bytes [filled_begin, filled_end)
  for (int64_t block = first; block < last; ++block) {
    const int64_t block_end = block_begin_of(block + 1, file_size);
    int64_t tokens = 0, newlines = 0, last_newline = -1;
    for (int64_t at = block_begin_of(block, file_size); at < block_end;) {
      if (at == filled_end) {
        const int64_t bytes = std::min(end - at, static_cast<int64_t>(buffer.size()));
        file.read_at(at, bytes, reinterpret_cast<char*>(buffer.data()));
        filled_begin = at;
        filled_end = at + bytes;
      }
      const int64_t stop = std::min(block_end, filled_end);
      const unsigned char* data = buffer.data() + (at - filled_begin);
      const int64_t bytes = stop - at;
      uint32_t starts = space_bit(before) & (space_bit(data[0]) ^ 1), lines = data[0] == '\n';
      for (int64_t i = 1; i < bytes; ++i) {
        starts += space_bit(data[i - 1]) & (space_bit(data[i]) ^ 1);
        lines += data[i] == '\n';
      }
      tokens += starts;
      newlines += lines;
      if (const void* found = ::memrchr(data, '\n', static_cast<size_t>(bytes))) {
        last_newline = at + (static_cast<const unsigned char*>(found) - data);
      }
      before = data[bytes - 1];
      at = stop;
    }
    int64_t* block_counts = counts + block * LatentIndex::kFields;
    block_counts[0] = tokens;
    block_counts[1] = newlines;
    block_counts[2] = last_newline + 1;
  }
}

}  // namespace

std::vector<int64_t> LatentIndex::count_part(const InputFile& file, int part, int parts, int threads) {
  const int64_t file_size = file.bytes();
  if (parts < 1 || part < 0 || part >= parts || file_size < 0) {
    throw std::invalid_argument("LatentIndex::count_part: part " + std::to_string(part) + " of " +
                                std::to_string(parts));
  }
  std::vector<int64_t> counts(static_cast<size_t>(kBlocks) * kFields, 0);
  const int64_t first = int64_t{kBlocks} * part / parts, last = int64_t{kBlocks} * (part + 1) / parts;
  parallel_for(last - first, threads, [&](int64_t begin, int64_t end) {
    count_blocks(file, first + begin, first + end, file_size, counts.data());
  });
  return counts;
}

LatentIndex::LatentIndex(std::shared_ptr<const InputFile> file, std::vector<int64_t> counts)
    : file_(std::move(file)),
      file_size_(file_->bytes()),
      tokens_before_(kBlocks + 1, 0),
      lines_before_(kBlocks + 1, 0),
      newline_before_(kBlocks + 1, -1) {
  if (counts.size() != static_cast<size_t>(kBlocks) * kFields) {
    throw std::invalid_argument("LatentIndex: " + std::to_string(counts.size()) + " counts");
  }
  for (size_t b = 0; b < static_cast<size_t>(kBlocks); ++b) {
    const int64_t* block = &counts[b * kFields];
    tokens_before_[b + 1] = tokens_before_[b] + block[0];
    lines_before_[b + 1] = lines_before_[b] + block[1];
    newline_before_[b + 1] = block[2] > 0 ? block[2] - 1 : newline_before_[b];
  }
}

int64_t LatentIndex::block_begin(int64_t block) const { return block_begin_of(block, file_size_); }

TextPosition LatentIndex::locate(int64_t token) const {
  if (token < 0) throw std::invalid_argument("LatentIndex::locate: token " + std::to_string(token));
  if (token >= tokens()) {
    return TextPosition{file_size_, 1 + lines_before_.back(), file_size_ - newline_before_.back()};
  }
  // The block holding the token's start: the last one with tokens_before <= token.
  const int64_t block =
      std::upper_bound(tokens_before_.begin(), tokens_before_.end(), token) - tokens_before_.begin() - 1;
  const InputFile& file = *file_;
  const int64_t begin = block_begin(block), end = block_begin(block + 1);
  std::vector<char> buffer(static_cast<size_t>(std::min(kScanBytes, end - begin)));
  bool prev_space = space_before(file, begin);
  int64_t seen = tokens_before_[block], line = 1 + lines_before_[block], last_newline = newline_before_[block];
  for (int64_t at = begin; at < end;) {
    const int64_t bytes = std::min(end - at, static_cast<int64_t>(buffer.size()));
    file.read_at(at, bytes, buffer.data());
    for (int64_t i = 0; i < bytes; ++i) {
      const char c = buffer[static_cast<size_t>(i)];
      const bool space = is_latent_space(c);
      if (!space && prev_space) {
        if (seen == token) return TextPosition{at + i, line, at + i - last_newline};
        ++seen;
      }
      if (c == '\n') {
        ++line;
        last_newline = at + i;
      }
      prev_space = space;
    }
    at += bytes;
  }
  file.check_unchanged();  // a map of other bytes than these
  throw std::logic_error("LatentIndex::locate: token " + std::to_string(token) + " is not in block " +
                         std::to_string(block) + " of " + file.path());
}

}  // namespace facegen
