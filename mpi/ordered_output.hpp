// ordered_output.hpp: the job's output files, written by all ranks at once through MPI-IO.
//
// Rank 0 creates each output as a temporary file beside its final path (AtomicFile: same
// directory, removed if the job fails or is killed by SIGTERM) and writes the headers; every rank
// then writes its own images straight into the file at the offset they belong, and rank 0
// renames the files into place once every rank has agreed that all went well. The files are
// byte for byte those of the single-process program:
//   PREFIX.txt  "N\n", then one line per image. Line lengths vary with the values, so every round
//               the ranks exchange their byte counts: MPI_Exscan gives each rank the bytes of the
//               ranks before it in the round, MPI_Allreduce the round's total (the next round's base).
//   PREFIX.bmp  (or PREFIX-0001.bmp, ... above --mosaic-tiles squared images, split by the same rule as
//               the single-process mosaic sink: file k holds images [(k-1) L, min(k L, N)) as a mosaic
//               of its own.) Each file: a 54-byte header (as stb_image_write writes it), then the (s*64)^2 mosaic, BGR, rows
//               bottom-up, each s*64*3 bytes (a multiple of 4: no padding). A rank's images fill
//               parts of tile rows; each part is 64 pixel rows of (tiles * 64 * 3) bytes at computed
//               offsets, one write when the part spans the whole mosaic width. Tiles no image lands
//               on stay black: the file is sized up front, and the gap reads as zeros.
//   PREFIX.npy  NumPy 1.0 header padded to 64 bytes, then float32 (N, 64, 64, 3): fixed offsets.
// png and mosaic-png are written by single-process runs only: the constructor refuses them.
// Memory per rank: one round's text (about 86 KB per image, formatted by the rank's CPU threads in
// blocks) and one tile-row part (12 KB per tile).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "files/atomic_file.hpp"
#include "run/pipeline.hpp"
#include "mpi/agreement.hpp"
#include "mpi/work_split.hpp"

namespace facegen {
namespace mpi {

// The 54 header bytes of the single-process BMP mosaic of `total_images` images.
std::string bmp_mosaic_header(int64_t total_images);
// Throws UserError if the mosaic of `total_images` images is larger than the BMP writer of the
// single-process program accepts (2 GiB), so that both refuse the same jobs.
void check_bmp_size(const std::string& path, int64_t total_images);

class OrderedOutputs {
 public:
  // Throws UserError for a format the ranks cannot write (png, mosaic-png) or a bad mosaic limit.
  OrderedOutputs(MPI_Comm comm, std::string prefix, std::vector<OutputFormat> formats, int64_t total_images,
                 int mosaic_tiles);
  ~OrderedOutputs();
  OrderedOutputs(const OrderedOutputs&) = delete;
  OrderedOutputs& operator=(const OrderedOutputs&) = delete;

  // Rank 0 only (others: nothing): create the temporary files, sized, with their headers.
  // Throws UserError naming the path (missing or read-only directory, disk full).
  void create();
  // Collective: every rank opens every temporary file for writing. Errors go into `status`.
  void open(RankStatus& status);
  // Collective, every round, on every rank (a rank with no images passes an empty slice):
  // writes images (slice.size(), 64, 64, 3) to every output. A rank that has already failed
  // still takes part in the exchange of byte counts, writing nothing.
  void write_round(const float* images, ImageRange slice, RankStatus& status);
  // Collective: closes the MPI files (after open() succeeded on every rank).
  void close();
  // Rank 0 only: flush to disk and rename every file into place. Throws UserError.
  void commit();

  // CPU threads that format this rank's text (default 1).
  void set_format_threads(int threads) { format_threads_ = std::max(1, threads); }

  std::vector<std::string> final_paths() const;
  double format_seconds() const { return format_seconds_; }
  double write_seconds() const { return write_seconds_; }

 private:
  void write_at(size_t file, int64_t offset, const void* data, int64_t bytes);
  void write_text(const float* images, ImageRange slice, size_t file, RankStatus& status);
  void write_bmp(const float* images, ImageRange slice, size_t file);
  void write_npy(const float* images, ImageRange slice, size_t file);

  // One output file: the text, the npy, or one of the BMP mosaic files with its images
  // [first, first + count), laid out on a side x side grid of tiles.
  struct Output {
    OutputFormat format;
    std::string path;
    int64_t first = 0;
    int64_t count = 0;
    int64_t side = 0;
  };

  MPI_Comm comm_;
  int rank_ = 0;
  std::vector<Output> outputs_;
  int64_t total_;
  std::vector<std::unique_ptr<AtomicFile>> temps_;   // rank 0: the temporary files
  std::vector<std::string> temp_paths_;              // every rank, after open()
  std::vector<MPI_File> files_;
  bool open_ = false;
  int64_t text_base_ = 0;       // where the current round's text starts
  int64_t npy_data_offset_ = 0;
  std::vector<std::vector<char>> text_blocks_;  // this rank's text of one round, one block per thread
  int format_threads_ = 1;
  std::vector<unsigned char> tile_rows_;  // one part of a tile row, file order
  double format_seconds_ = 0;
  double write_seconds_ = 0;
};

}  // namespace mpi
}  // namespace facegen
