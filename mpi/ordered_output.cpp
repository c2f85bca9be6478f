// ordered_output.cpp: MPI-IO writes of text, BMP and NumPy outputs at computed offsets
// (see ordered_output.hpp for the layout of each file).
#include "mpi/ordered_output.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "common/errors.hpp"
#include "files/image_sink.hpp"
#include "generator/network.hpp"
#include "common/text_format.hpp"
#include "common/threads.hpp"
#include "mpi/mpi_check.hpp"
#include "mpi/polite_wait.hpp"

namespace facegen {
namespace mpi {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kBmpHeaderBytes = 54;
constexpr int64_t kTileRowBytes = kImageSize * kImageChannels;  // one pixel row of one tile: 192
constexpr int64_t kMaxWriteBytes = int64_t{1} << 30;             // MPI counts are ints

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void put_u16(std::string& out, uint32_t v) {
  out.push_back(static_cast<char>(v & 0xff));
  out.push_back(static_cast<char>((v >> 8) & 0xff));
}

void put_u32(std::string& out, uint32_t v) {
  put_u16(out, v & 0xffff);
  put_u16(out, v >> 16);
}


}  // namespace

std::string bmp_mosaic_header(int64_t total_images) {
  const int64_t width = mosaic_side(total_images) * kImageSize;
  const int64_t pixel_bytes = width * width * 3;
  // BITMAPFILEHEADER + BITMAPINFOHEADER as stb_image_write fills them for 24-bit pictures: a
  // positive height (rows bottom-up), no compression, image size and resolution left 0.
  std::string header = "BM";
  put_u32(header, static_cast<uint32_t>(kBmpHeaderBytes + pixel_bytes));
  put_u16(header, 0);
  put_u16(header, 0);
  put_u32(header, kBmpHeaderBytes);
  put_u32(header, 40);
  put_u32(header, static_cast<uint32_t>(width));
  put_u32(header, static_cast<uint32_t>(width));
  put_u16(header, 1);   // planes
  put_u16(header, 24);  // bits per pixel
  for (int i = 0; i < 6; ++i) put_u32(header, 0);
  return header;
}

void check_bmp_size(const std::string& path, int64_t total_images) {
  const int64_t pixels = mosaic_side(total_images) * kImageSize;
  const int64_t bytes = pixels * pixels * 3 + kBmpHeaderBytes;
  if (bytes > std::numeric_limits<int>::max()) {
    throw UserError("cannot write " + path + ": a mosaic of " + with_commas(total_images) + " images is " +
                    with_commas(pixels) + " x " + with_commas(pixels) + " pixels, " + with_commas(bytes) +
                    " bytes, more than the BMP writer can hold (2 GiB)");
  }
}

OrderedOutputs::OrderedOutputs(MPI_Comm comm, std::string prefix, std::vector<OutputFormat> formats,
                               int64_t total_images, int mosaic_tiles)
    : comm_(comm), total_(total_images) {
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  for (OutputFormat format : formats) {
    if (format == OutputFormat::Png || format == OutputFormat::MosaicPng) {
      throw UserError(std::string("--formats ") + format_name(format) +
                      " is written by single-process runs only; a parallel run writes txt, bmp and npy");
    }
    if (format != OutputFormat::Bmp) {
      outputs_.push_back({format, prefix + "." + format_name(format), 0, total_, 0});
      continue;
    }
    // The same split as the single-process mosaic sink, so the files are the same.
    const int64_t per_file = int64_t{mosaic_tiles} * mosaic_tiles;
    const std::vector<std::string> paths = mosaic_paths(prefix, "bmp", total_, mosaic_tiles);
    for (size_t k = 0; k < paths.size(); ++k) {
      const int64_t first = static_cast<int64_t>(k) * per_file;
      const int64_t count = paths.size() == 1 ? total_ : std::min(per_file, total_ - first);
      outputs_.push_back({format, paths[k], first, count, mosaic_side(count)});
    }
  }
}

OrderedOutputs::~OrderedOutputs() = default;  // rank 0's AtomicFiles remove what was not committed

std::vector<std::string> OrderedOutputs::final_paths() const {
  std::vector<std::string> paths;
  for (const Output& output : outputs_) paths.push_back(output.path);
  return paths;
}

void OrderedOutputs::create() {
  if (rank_ != 0) return;
  const std::vector<std::string> paths = final_paths();
  for (const Output& output : outputs_) {
    if (output.format == OutputFormat::Bmp) check_bmp_size(output.path, output.count);
  }
  for (size_t i = 0; i < outputs_.size(); ++i) {
    temps_.push_back(std::make_unique<AtomicFile>(paths[i]));
    std::string header;
    int64_t size = 0;  // bytes known in advance; text grows as it is written
    switch (outputs_[i].format) {
      case OutputFormat::Text:
        header = std::to_string(total_) + "\n";
        break;
      case OutputFormat::Bmp: {
        const int64_t side = outputs_[i].side;
        header = bmp_mosaic_header(outputs_[i].count);
        size = kBmpHeaderBytes + side * kImageSize * side * kImageSize * 3;
        break;
      }
      case OutputFormat::Npy:
        header = npy_header(total_);
        size = static_cast<int64_t>(header.size()) + total_ * kImageValues * int64_t{4};
        break;
      case OutputFormat::Png:
      case OutputFormat::MosaicPng:
        throw std::logic_error("png outputs are refused by the constructor");
    }
    // The header goes through the AtomicFile, which flushes it before its fsync and rename; the
    // ranks' writes never touch these bytes. Sizing the file makes black tiles read as zeros.
    temps_.back()->write(header.data(), header.size());
    if (size > 0 && ::truncate(temps_.back()->temp_path().c_str(), size) != 0) {
      const int err = errno;
      throw UserError("cannot write " + paths[i] + ": " + std::strerror(err));
    }
  }
}

void OrderedOutputs::open(RankStatus& status) {
  // Every rank learns the temporary names from rank 0.
  std::string joined;
  if (rank_ == 0) {
    for (const auto& temp : temps_) joined += temp->temp_path() + '\n';
  }
  int64_t length = static_cast<int64_t>(joined.size());
  MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT64_T, 0, comm_));
  joined.resize(static_cast<size_t>(length));
  MPI_CHECK(MPI_Bcast(joined.data(), static_cast<int>(length), MPI_CHAR, 0, comm_));
  for (size_t start = 0; start < joined.size();) {
    const size_t end = joined.find('\n', start);
    temp_paths_.push_back(joined.substr(start, end - start));
    start = end + 1;
  }

  const std::vector<std::string> paths = final_paths();
  files_.assign(outputs_.size(), MPI_FILE_NULL);
  open_ = true;
  // MPI_File_open is collective: a rank whose open fails returns while the others go on into the
  // open's own collectives, and the job hangs. On one host the ranks see the same directories, but
  // a node that lacks the output directory (or may not write there) is the one rank that fails.
  // So every rank first tries the files itself, and the ranks open them together only if all can.
  int usable = 1;
  for (size_t i = 0; i < outputs_.size() && usable; ++i) {
    const int fd = ::open(temp_paths_[i].c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      usable = 0;
      attempt(status, [&] {
        throw UserError("cannot open for writing " + paths[i] + " (as " + temp_paths_[i] + "): " + std::strerror(err));
      });
    } else {
      ::close(fd);
    }
  }
  int all_usable = 0;
  MPI_CHECK(MPI_Allreduce(&usable, &all_usable, 1, MPI_INT, MPI_MIN, comm_));
  if (!all_usable) return;  // the failed ranks say why at the next agreement
  for (size_t i = 0; i < outputs_.size(); ++i) {
    const int code = MPI_File_open(comm_, temp_paths_[i].c_str(), MPI_MODE_WRONLY, MPI_INFO_NULL, &files_[i]);
    attempt(status, [&] { check_file(code, "cannot open for writing", paths[i] + " (as " + temp_paths_[i] + ")"); });
  }
  text_base_ = static_cast<int64_t>(std::to_string(total_).size()) + 1;
  npy_data_offset_ = static_cast<int64_t>(npy_header(total_).size());
}

void OrderedOutputs::write_at(size_t file, int64_t offset, const void* data, int64_t bytes) {
  const auto start = Clock::now();
  const char* from = static_cast<const char*>(data);
  while (bytes > 0) {
    const int64_t piece = std::min(bytes, kMaxWriteBytes);
    MPI_Status mpi_status;
    check_file(MPI_File_write_at(files_[file], offset, from, static_cast<int>(piece), MPI_BYTE, &mpi_status),
               "cannot write", final_paths()[file]);
    offset += piece;
    from += piece;
    bytes -= piece;
  }
  write_seconds_ += seconds_since(start);
}

void OrderedOutputs::write_round(const float* images, ImageRange slice, RankStatus& status) {
  for (size_t i = 0; i < outputs_.size(); ++i) {
    switch (outputs_[i].format) {
      case OutputFormat::Text:
        write_text(images, slice, i, status);  // collective
        break;
      case OutputFormat::Bmp:
        attempt(status, [&] { write_bmp(images, slice, i); });
        break;
      case OutputFormat::Npy:
        attempt(status, [&] { write_npy(images, slice, i); });
        break;
      case OutputFormat::Png:
      case OutputFormat::MosaicPng:
        break;  // refused by the constructor
    }
  }
}

void OrderedOutputs::write_text(const float* images, ImageRange slice, size_t file, RankStatus& status) {
  // Formatting is the slow part of a text output (~86 KB per image), so the rank's CPU threads each
  // format one contiguous block of the slice into a buffer of their own; the blocks are then written
  // one after another. A line is at most 98,305 bytes for values in [-1, 1] (tanh), but up to
  // kMaxImageTextBytes for any float: a buffer grows when less than that is left.
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(format_threads_, slice.size()));
  if (static_cast<int64_t>(text_blocks_.size()) < blocks) text_blocks_.resize(static_cast<size_t>(blocks));
  std::vector<int64_t> block_bytes(static_cast<size_t>(blocks), 0);
  int64_t bytes = 0;
  attempt(status, [&] {
    const auto start = Clock::now();
    parallel_for(blocks, format_threads_, [&](int64_t first_block, int64_t end_block) {
      for (int64_t b = first_block; b < end_block; ++b) {
        std::vector<char>& text = text_blocks_[static_cast<size_t>(b)];
        const int64_t first = slice.size() * b / blocks;
        const int64_t end = slice.size() * (b + 1) / blocks;
        size_t used = 0;
        for (int64_t i = first; i < end; ++i) {
          if (text.size() - used < kMaxImageTextBytes) {
            text.resize(std::max(used + kMaxImageTextBytes, used + static_cast<size_t>(end - i) * 98305));
          }
          used += format_image_text(images + i * kImageValues, text.data() + used);
        }
        block_bytes[static_cast<size_t>(b)] = static_cast<int64_t>(used);
      }
    });
    for (int64_t b : block_bytes) bytes += b;
    format_seconds_ += seconds_since(start);
  });
  if (status.failed) bytes = 0;
  // Where this rank's text starts in the round, and where the next round starts.
  int64_t before = 0;
  int64_t round_total = 0;
  MPI_Request requests[2];
  MPI_CHECK(MPI_Iexscan(&bytes, &before, 1, MPI_INT64_T, MPI_SUM, comm_, &requests[0]));
  MPI_CHECK(MPI_Iallreduce(&bytes, &round_total, 1, MPI_INT64_T, MPI_SUM, comm_, &requests[1]));
  wait_politely(&requests[0]);  // the ranks that finished their slice first wait here
  wait_politely(&requests[1]);
  if (rank_ == 0) before = 0;  // MPI_Exscan leaves rank 0's result undefined
  if (bytes > 0) {
    attempt(status, [&] {
      int64_t offset = text_base_ + before;
      for (int64_t b = 0; b < blocks; ++b) {
        write_at(file, offset, text_blocks_[static_cast<size_t>(b)].data(), block_bytes[static_cast<size_t>(b)]);
        offset += block_bytes[static_cast<size_t>(b)];
      }
    });
  }
  text_base_ += round_total;
}

void OrderedOutputs::write_bmp(const float* images, ImageRange slice, size_t file) {
  // This file's images are [mosaic.first, mosaic.first + mosaic.count) of the job; positions below
  // are the file's own (image 0 is its top-left tile).
  const Output& mosaic = outputs_[file];
  const int64_t side = mosaic.side;
  const int64_t width_bytes = side * kImageSize * 3;  // one pixel row of the whole mosaic
  const int64_t height = side * kImageSize;
  const int64_t begin = std::max(slice.begin, mosaic.first) - mosaic.first;
  const int64_t end = std::min(slice.end, mosaic.first + mosaic.count) - mosaic.first;
  const int64_t slice_offset = mosaic.first - slice.begin;  // file position -> index in `images`
  for (int64_t first = begin; first < end;) {
    // The run of this slice's images that lies in one tile row: tiles [col, col + count).
    const int64_t tile_row = first / side;
    const int64_t col = first % side;
    const int64_t count = std::min(end - first, side - col);
    const int64_t span = count * kTileRowBytes;
    const auto start = Clock::now();
    tile_rows_.resize(static_cast<size_t>(span * kImageSize));
    // File order is bottom-up, so the tile's last pixel row comes first.
    for (int y = 0; y < kImageSize; ++y) {
      unsigned char* row = tile_rows_.data() + (kImageSize - 1 - y) * span;
      for (int64_t t = 0; t < count; ++t) {
        const float* src = images + (first + slice_offset + t) * kImageValues + y * kImageSize * kImageChannels;
        unsigned char* dst = row + t * kTileRowBytes;
        for (int x = 0; x < kImageSize; ++x) {  // RGB in, BGR out
          dst[3 * x + 0] = channel_to_byte(src[3 * x + 2]);
          dst[3 * x + 1] = channel_to_byte(src[3 * x + 1]);
          dst[3 * x + 2] = channel_to_byte(src[3 * x + 0]);
        }
      }
    }
    format_seconds_ += seconds_since(start);
    // Mosaic pixel row Y (top-down) is file row height-1-Y.
    const int64_t bottom_row = tile_row * kImageSize + kImageSize - 1;
    const int64_t first_offset = kBmpHeaderBytes + (height - 1 - bottom_row) * width_bytes + col * kTileRowBytes;
    if (span == width_bytes) {
      write_at(file, first_offset, tile_rows_.data(), span * kImageSize);  // whole rows: contiguous
    } else {
      for (int r = 0; r < kImageSize; ++r) {
        write_at(file, first_offset + r * width_bytes, tile_rows_.data() + r * span, span);
      }
    }
    first += count;
  }
}

void OrderedOutputs::write_npy(const float* images, ImageRange slice, size_t file) {
  // (count, 64, 64, 3) float32, little-endian like the machines this runs on.
  const int64_t image_bytes = int64_t{kImageValues} * 4;
  write_at(file, npy_data_offset_ + slice.begin * image_bytes, images, slice.size() * image_bytes);
}

void OrderedOutputs::close() {
  if (!open_) return;
  for (MPI_File& file : files_) {
    if (file != MPI_FILE_NULL) MPI_CHECK(MPI_File_close(&file));
  }
  open_ = false;
}

void OrderedOutputs::commit() {
  if (rank_ != 0) return;
  for (auto& temp : temps_) temp->commit();
}

}  // namespace mpi
}  // namespace facegen
