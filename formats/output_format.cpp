// output_format.cpp: the files of each output format and where a run of images goes in them
// (see output_format.hpp for each layout). The text lines themselves are made in text_lines.cpp.
#include "formats/output_format.hpp"

#include <sys/mman.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "common/text_format.hpp"
#include "common/threads.hpp"
#include "common/path_parts.hpp"
#include "formats/png_encoder.hpp"
#include "formats/tar_shard.hpp"
#include "common/temp_registry.hpp"

namespace facegen {
namespace {

constexpr int64_t kBmpHeaderBytes = 14 + 40;

void put_u16(std::string& out, uint32_t v) {
  out.push_back(static_cast<char>(v & 0xff));
  out.push_back(static_cast<char>((v >> 8) & 0xff));
}

void put_u32(std::string& out, uint32_t v) {
  put_u16(out, v & 0xffff);
  put_u16(out, v >> 16);
}

// The grid of a mosaic file, after checking that the file fits BMP's int sizes (the PNG mosaic keeps
// the same limit, so that both mosaics accept the same jobs).
MosaicGrid checked_grid(const std::string& path, int64_t images, const OutputOptions& options) {
  if (images < 1) throw std::invalid_argument("mosaic: a mosaic needs at least one image");
  const MosaicGrid grid = mosaic_grid(images, options.grid_columns, options.grid_padding, options.image_size);
  const int64_t bytes = bmp_row_bytes(grid) * grid.height() + kBmpHeaderBytes;
  if (bytes > std::numeric_limits<int>::max()) {
    throw UserError("cannot write " + path + ": a mosaic of " + with_commas(images) + " images is " +
                    with_commas(grid.width()) + " x " + with_commas(grid.height()) + " pixels, " +
                    with_commas(bytes) + " bytes, more than the BMP writer can hold (2 GiB)");
  }
  return grid;
}

// Writes bytes to a new file at path, every call checked. Throws UserError (disk full, ...).
void write_whole_file(const std::string& path, const std::string& shown, std::string_view bytes) {
  int fd;
  {
    TempCreation creating;  // a signal's cleanup of the temporary folder waits for the file to exist
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  }
  if (fd < 0) throw UserError("cannot create output file " + shown + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      ::close(fd);
      throw UserError("writing " + shown + " failed: " + std::strerror(err) +
                      (err == EFBIG ? " (the file size limit, ulimit -f)" : ""));
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) throw UserError("writing " + shown + " failed: " + std::strerror(errno));
}

}  // namespace

std::vector<OutputFormat> parse_formats(const std::string& list) {
  static const char kExpected[] = "expected a comma-separated list of txt, bmp, npy, png, mosaic-png, npy-u8, tar";
  std::vector<OutputFormat> formats;
  std::stringstream stream(list);
  std::string name;
  while (std::getline(stream, name, ',')) {
    OutputFormat format;
    if (name == "txt" || name == "text") {
      format = OutputFormat::Text;
    } else if (name == "bmp") {
      format = OutputFormat::Bmp;
    } else if (name == "npy") {
      format = OutputFormat::Npy;
    } else if (name == "png") {
      format = OutputFormat::Png;
    } else if (name == "mosaic-png") {
      format = OutputFormat::MosaicPng;
    } else if (name == "npy-u8") {
      format = OutputFormat::NpyU8;
    } else if (name == "tar") {
      format = OutputFormat::Tar;
    } else {
      throw UserError("unknown output format '" + name + "' in --formats '" + list + "' (" + kExpected + ")");
    }
    if (std::find(formats.begin(), formats.end(), format) != formats.end()) {
      throw UserError("--formats '" + list + "' lists " + format_name(format) + " twice" +
                      (name == "text" || (format == OutputFormat::Text && list.find("text") != std::string::npos)
                           ? " (text is txt)" : "") + "; list each format once");
    }
    formats.push_back(format);
  }
  if (formats.empty()) throw UserError(std::string("--formats is empty (") + kExpected + ")");
  return formats;
}

const char* format_name(OutputFormat format) {
  switch (format) {
    case OutputFormat::Text: return "txt";
    case OutputFormat::Bmp: return "bmp";
    case OutputFormat::Npy: return "npy";
    case OutputFormat::Png: return "png";
    case OutputFormat::MosaicPng: return "mosaic-png";
    case OutputFormat::NpyU8: return "npy-u8";
    case OutputFormat::Tar: return "tar";
  }
  return "?";
}

const std::vector<OutputFormat>& every_format() {
  static const std::vector<OutputFormat> all{OutputFormat::Text, OutputFormat::Bmp,   OutputFormat::Npy,
                                             OutputFormat::Png,  OutputFormat::MosaicPng, OutputFormat::NpyU8,
                                             OutputFormat::Tar};
  return all;
}

bool is_sharded_format(OutputFormat format) {
  return format == OutputFormat::Tar || format == OutputFormat::Npy || format == OutputFormat::NpyU8;
}

bool is_made_of_many_files(OutputFormat format, int64_t shard_images) {
  return format == OutputFormat::Tar || format == OutputFormat::Png ||
         ((format == OutputFormat::Npy || format == OutputFormat::NpyU8) && shard_images > 0);
}

bool is_eight_bit_format(OutputFormat format) {
  return format != OutputFormat::Text && format != OutputFormat::Npy;
}

ImageEncoding image_encoding_for(const std::vector<OutputFormat>& formats) {
  for (OutputFormat format : formats) {
    if (!is_eight_bit_format(format)) return ImageEncoding::Float32;
  }
  return formats.empty() ? ImageEncoding::Float32 : ImageEncoding::Rgb8;
}

const char* format_extension(OutputFormat format) {
  switch (format) {
    case OutputFormat::Text: return "txt";
    case OutputFormat::Npy: return "npy";
    case OutputFormat::Bmp: return "bmp";
    case OutputFormat::MosaicPng: return "png";
    case OutputFormat::NpyU8: return "u8.npy";
    case OutputFormat::Tar: return "tar";
    case OutputFormat::Png: break;
  }
  return "";
}

OutputLayout::OutputLayout(OutputFormat format, const std::string& prefix, int64_t total_images,
                           const OutputOptions& options)
    : format_(format), prefix_(prefix), total_(total_images), options_(options) {
  if (total_images < 0) throw std::invalid_argument("output: negative image count");
  options_.on_notice = nullptr;  // told here once, not kept
  if (options.image_channels != 1 && options.image_channels != 3) {
    throw std::invalid_argument("output: images of " + std::to_string(options.image_channels) +
                                " channels (1 or 3 are written)");
  }
  if (options.image_size < 1) throw std::invalid_argument("output: images of " + std::to_string(options.image_size) + " pixels a side");
  if (format == OutputFormat::Text) header_bytes_ = static_cast<int64_t>(std::to_string(total_images).size()) + 1;
  if (options.shard_images < 0 || options.shard_images > kMaxShardImages) {
    throw UserError("--shard-images must be between 1 and " + std::to_string(kMaxShardImages) + ", got " +
                    std::to_string(options.shard_images));
  }
  if (is_sharded_format(format)) {
    per_file_ = options.shard_images > 0 ? options.shard_images : format == OutputFormat::Tar ? kDefaultShardImages : 0;
    return;
  }
  if (format != OutputFormat::Bmp && format != OutputFormat::MosaicPng) return;
  // The mosaics. mosaic_tiles 0: one file, however large.
  const int tiles = options.mosaic_tiles;
  if (tiles != 0 && (tiles < 1 || tiles > kMaxMosaicTiles)) {
    throw UserError("--mosaic-tiles must be between 1 and " + std::to_string(kMaxMosaicTiles) +
                    " (a BMP of at most 2 GiB), got " + std::to_string(tiles));
  }
  if (options.grid_columns < 0) {
    throw UserError("--grid-columns must be at least 1, got " + std::to_string(options.grid_columns));
  }
  if (options.grid_padding < 0 || options.grid_padding > kMaxGridPadding) {
    throw UserError("--grid-padding must be between 0 and " + std::to_string(kMaxGridPadding) + " pixels, got " +
                    std::to_string(options.grid_padding));
  }
  per_file_ = tiles == 0 ? std::max<int64_t>(total_images, 1) : int64_t{tiles} * tiles;
  const int64_t mosaics = mosaic_count();
  // The first file is the largest: a grid only grows with its images.
  checked_grid(mosaic_file_path(0), std::min(per_file_, total_images), options_);
  if (mosaics > 1 && options.on_notice) {
    options.on_notice(with_commas(total_images) + " images are more than one mosaic holds (" +
                      with_commas(per_file_) + ", " + std::to_string(tiles) + " x " + std::to_string(tiles) +
                      " tiles, --mosaic-tiles): writing " + with_commas(mosaics) + " files " +
                      mosaic_file_path(0) + " ... " + mosaic_file_path(mosaics - 1));
  }
}

int64_t OutputLayout::mosaic_count() const {
  if (format_ != OutputFormat::Bmp && format_ != OutputFormat::MosaicPng) return 1;
  return options_.mosaic_tiles == 0 ? 1 : mosaic_file_count(total_, options_.mosaic_tiles);
}

int64_t OutputLayout::shard_count() const {
  if (!is_sharded_format(format_) || per_file_ == 0) return 1;
  return std::max<int64_t>(1, (total_ + per_file_ - 1) / per_file_);
}

std::string OutputLayout::shard_file_path(int64_t shard) const {
  if (per_file_ == 0) return prefix_ + "." + format_extension(format_);
  return shard_path(prefix_, format_extension(format_), shard, shard_count());
}

std::string OutputLayout::mosaic_file_path(int64_t mosaic) const {
  return mosaic_path(prefix_, format_extension(format_), mosaic, mosaic_count());
}

bool OutputLayout::writes_name(const std::string& name) const {
  const std::string stem = base_name(prefix_);
  if (!is_output_name(format_, stem, name)) return false;
  if (is_sharded_format(format_)) {
    if (per_file_ == 0) return name == base_name(shard_file_path(0));
    // STEM-<digits>.EXT: shard k when the digits are those shard_path writes for k.
    const size_t digits_start = stem.size() + 1;
    const size_t digits_end = name.size() - std::strlen(format_extension(format_)) - 1;
    if (digits_end - digits_start > 18) return false;
    const int64_t number = std::stoll(name.substr(digits_start, digits_end - digits_start));
    return number < shard_count() && name == base_name(shard_file_path(number));
  }
  if (format_ != OutputFormat::Bmp && format_ != OutputFormat::MosaicPng) return name == base_name(file(0).path);
  const int64_t mosaics = mosaic_count();
  if (mosaics == 1) return name == base_name(mosaic_file_path(0));
  // STEM-<digits>.EXT: file k of the split when the digits are those mosaic_path writes for k.
  const size_t digits_start = stem.size() + 1;
  const size_t digits_end = name.rfind('.');
  if (digits_end - digits_start > 18) return false;
  const int64_t number = std::stoll(name.substr(digits_start, digits_end - digits_start));
  return number >= 1 && number <= mosaics && name == base_name(mosaic_file_path(number - 1));
}

size_t OutputLayout::file_count() const {
  if (is_sharded_format(format_)) return static_cast<size_t>(shard_count());
  const int64_t mosaics = mosaic_count();
  return static_cast<size_t>(format_ == OutputFormat::MosaicPng ? 2 * mosaics : mosaics);
}

OutputFile OutputLayout::file(size_t index) const {
  using Kind = OutputFile::Kind;
  if (index >= file_count()) {
    throw std::out_of_range("output " + prefix_ + ": no file " + std::to_string(index) + " of " +
                            std::to_string(file_count()));
  }
  switch (format_) {
    case OutputFormat::Text:
      return {Kind::Data, prefix_ + "." + format_extension(format_), std::to_string(total_) + "\n", -1, 0, total_, {},
              format_};
    case OutputFormat::Npy:
    case OutputFormat::NpyU8:
    case OutputFormat::Tar: {
      const int64_t first = per_file_ == 0 ? 0 : static_cast<int64_t>(index) * per_file_;
      const int64_t count = per_file_ == 0 ? total_ : std::min(per_file_, total_ - first);
      const std::string path = shard_file_path(static_cast<int64_t>(index));
      // An empty job's one shard is an empty archive: its end alone.
      if (format_ == OutputFormat::Tar) {
        return {Kind::Data, path, count == 0 ? std::string(kTarEndBytes, '\0') : "", -1, first, count, {}, format_};
      }
      // (count, S, S, nc) float32 or (count, S, S, 3) uint8 after the header.
      const bool u8 = format_ == OutputFormat::NpyU8;
      const std::string header = u8 ? npy_u8_header(count, image_size()) : npy_header(count, image_channels(), image_size());
      const int64_t bytes = u8 ? count * rgb8_image_bytes(image_size()) : count * image_values() * 4;
      return {Kind::Data, path, header, static_cast<int64_t>(header.size()) + bytes, first, count, {}, format_};
    }
    case OutputFormat::Png: {
      const size_t longest = png_longest_relative_path(total_, options_.png_layout, options_.facts);
      return {Kind::Folder, prefix_, "", -1, 0, total_, {}, format_, longest};
    }
    case OutputFormat::Bmp:
    case OutputFormat::MosaicPng:
      break;
  }
  const bool bmp = format_ == OutputFormat::Bmp;
  const int64_t mosaic = static_cast<int64_t>(bmp ? index : index / 2);
  OutputFile file;
  file.format = format_;
  file.path = mosaic_file_path(mosaic);
  file.first = mosaic * per_file_;
  file.count = std::min(per_file_, total_ - file.first);
  file.grid = checked_grid(file.path, file.count, options_);
  if (bmp) {
    file.header = bmp_header(file.grid);
    file.size = kBmpHeaderBytes + bmp_row_bytes(file.grid) * file.grid.height();
  } else if (index % 2 == 0) {
    file.kind = Kind::Pixels;
    file.size = file.grid.width() * file.grid.height() * 3;
  } else {
    file.kind = Kind::Encoded;
  }
  return file;
}

std::pair<size_t, size_t> OutputLayout::files_of(int64_t first, int64_t count) const {
  if (count <= 0) return {0, 0};
  if (is_sharded_format(format_)) {
    if (per_file_ == 0) return {0, 1};
    return {static_cast<size_t>(first / per_file_), static_cast<size_t>((first + count - 1) / per_file_ + 1)};
  }
  if (format_ != OutputFormat::Bmp && format_ != OutputFormat::MosaicPng) return {0, 1};
  const size_t step = format_ == OutputFormat::Bmp ? 1 : 2;
  const size_t begin = static_cast<size_t>(first / per_file_) * step;
  const size_t end = static_cast<size_t>((first + count - 1) / per_file_ + 1) * step;
  return {begin, end};
}

std::string OutputLayout::describe() const {
  if (format_ == OutputFormat::Png) return prefix_ + "/";
  if (is_sharded_format(format_)) {
    const int64_t shards = shard_count();
    if (per_file_ == 0 || shards == 1) return shard_file_path(0);
    return shard_file_path(0) + " ... " + shard_file_path(shards - 1) + " (" + std::to_string(shards) + " files)";
  }
  const int64_t mosaics = mosaic_count();
  if (mosaics == 1) return file(0).path;
  return mosaic_file_path(0) + " ... " + mosaic_file_path(mosaics - 1) + " (" + std::to_string(mosaics) + " files)";
}

int64_t OutputLayout::known_bytes() const {
  if (format_ == OutputFormat::Npy || format_ == OutputFormat::NpyU8) {
    int64_t bytes = 0;
    for (size_t k = 0; k < file_count(); ++k) bytes += file(k).size;
    return bytes;
  }
  if (format_ != OutputFormat::Bmp) return -1;
  const int64_t mosaics = mosaic_count();
  if (total_ == 0) return file(0).size;
  // Every file but the last holds per_file_ images.
  return (mosaics - 1) * file(0).size + file(static_cast<size_t>(mosaics - 1)).size;
}

void OutputLayout::write_run(const ImageRun& images, int64_t first, int64_t count, FileWriter& out) const {
  if (first < 0 || count < 0 || count > total_ - first) {
    throw std::logic_error("output " + describe() + ": images [" + std::to_string(first) + ", " +
                           std::to_string(first + count) + ") of " + std::to_string(total_));
  }
  if (count == 0) return;
  switch (format_) {
    case OutputFormat::Npy:
    case OutputFormat::NpyU8: write_sharded_array_run(images, first, count, out); return;
    case OutputFormat::Tar: break;
    case OutputFormat::Bmp: write_mosaic_run(images, first, count, out, true); return;
    case OutputFormat::MosaicPng: write_mosaic_run(images, first, count, out, false); return;
    case OutputFormat::Png: write_png_files(images, first, count, out); return;
    case OutputFormat::Text: break;
  }
  throw std::logic_error("OutputLayout::write_run: " + std::string(format_name(format_)) +
                         " goes through write_record_run");
}

// npy and npy-u8: the run's images, per shard they touch, at their fixed offsets: float32 as they are
// (little-endian like the machines this runs on), or 8-bit RGB as they came or converted in a buffer of
// the thread's own.
void OutputLayout::write_sharded_array_run(const ImageRun& images, int64_t first, int64_t count,
                                           FileWriter& out) const {
  thread_local std::vector<unsigned char> rgb;  // (images, S, S, 3)
  constexpr int64_t kRgbImagesPerWrite = 256;
  const int64_t rgb_bytes = rgb8_image_bytes(image_size());
  const auto [begin_file, end_file] = files_of(first, count);
  for (size_t f = begin_file; f < end_file; ++f) {
    const OutputFile shard = file(f);
    const int64_t begin = std::max(first, shard.first);
    const int64_t end = std::min(first + count, shard.first + shard.count);
    const ImageRun from = images.skip(begin - first);
    const int64_t header = static_cast<int64_t>(shard.header.size());
    if (format_ == OutputFormat::Npy) {
      out.write_at(f, header + (begin - shard.first) * image_values() * 4, from.values(),
                   (end - begin) * image_values() * 4);
    } else if (from.encoding == ImageEncoding::Rgb8) {
      out.write_at(f, header + (begin - shard.first) * rgb_bytes, from.data, (end - begin) * rgb_bytes);
    } else {
      // At most kRgbImagesPerWrite images at a time: 3 MiB per thread for 64x64 images, whatever the run.
      for (int64_t at = begin; at < end; at += kRgbImagesPerWrite) {
        const int64_t images_now = std::min(kRgbImagesPerWrite, end - at);
        rgb.resize(static_cast<size_t>(images_now * rgb_bytes));
        for (int64_t i = 0; i < images_now; ++i) {
          image_to_rgb8(from.values() + (at - begin + i) * image_values(), image_channels(), image_size(),
                        rgb.data() + i * rgb_bytes);
        }
        out.write_at(f, header + (at - shard.first) * rgb_bytes, rgb.data(), images_now * rgb_bytes);
      }
    }
    out.images_written(f, end - begin);
  }
}

size_t OutputLayout::file_of_image(int64_t index) const {
  if (per_file_ == 0 || !is_sharded_format(format_)) return 0;
  return static_cast<size_t>(index / per_file_);
}

size_t OutputLayout::append_record(const ImageRun& images, int64_t i, int64_t index, std::vector<char>& block,
                                   size_t used) const {
  if (format_ == OutputFormat::Text) {
    const size_t most = max_image_text_bytes(image_values());
    if (block.size() - used < most) block.resize(std::max(used + most, block.size() * 2));
    return used + format_image_text(images.values() + i * image_values(), block.data() + used, image_values());
  }
  if (format_ != OutputFormat::Tar) throw std::logic_error("append_record: " + std::string(format_name(format_)));
  thread_local std::vector<unsigned char> scratch;  // (S, S, 3)
  thread_local std::string png, sample;
  scratch.resize(static_cast<size_t>(rgb8_image_bytes(image_size())));
  encode_tile_png(images.rgb8_image(i, scratch.data()), image_size(), options_.png_level, png);
  sample.clear();
  append_tar_sample(sample, index, png, options_.facts);
  // The shard's last sample carries the archive's end: a shard is complete with its last image.
  if (ends_shard(index)) sample.append(kTarEndBytes, '\0');
  if (block.size() < used + sample.size()) block.resize(std::max(used + sample.size(), block.size() * 2));
  std::memcpy(block.data() + used, sample.data(), sample.size());
  return used + sample.size();
}

void OutputLayout::write_run_threaded(const ImageRun& images, int64_t first, int64_t count, FileWriter& out,
                                      int threads) const {
  if (images.encoded && images.encoded->kind == EncodedKind::Parts) {  // a thread a part, as below
    const EncodedRun& run = *images.encoded;
    parallel_for(run.part_count, threads, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) {
        const MosaicPart& part = run.parts[k];
        if (part.image >= images.encoded_from && part.image < images.encoded_from + count) {
          write_mosaic_part(part, run.bytes + part.at, out);
        }
      }
    });
    return;
  }
  if (format_ != OutputFormat::Bmp && format_ != OutputFormat::MosaicPng) {
    parallel_for(count, threads, [&](int64_t begin, int64_t end) {
      write_run(images.skip(begin), first + begin, end - begin, out);
    });
    return;
  }
  // Cuts at every tile-row start and file start inside the run: (pieces + 1) offsets from `first`.
  std::vector<int64_t> cuts{0};
  const auto [begin_file, end_file] = files_of(first, count);
  for (size_t f = begin_file; f < end_file; f += format_ == OutputFormat::Bmp ? 1 : 2) {
    const OutputFile mosaic = file(f);
    const int64_t columns = mosaic.grid.columns;
    const int64_t end = std::min(first + count, mosaic.first + mosaic.count);
    int64_t n = std::max(first, mosaic.first);
    while (n < end) {
      n = std::min(end, mosaic.first + ((n - mosaic.first) / columns + 1) * columns);  // the next row's first tile
      cuts.push_back(n - first);
    }
  }
  parallel_for(static_cast<int64_t>(cuts.size()) - 1, threads, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      write_run(images.skip(cuts[p]), first + cuts[p], cuts[p + 1] - cuts[p], out);
    }
  });
}

// A run's images land in parts of tile rows; each part is S RGB pixel rows of its tiles (a grey value
// repeated in R, G and B; the padding between them black), gathered in file order in a buffer of the
// thread's own (or made by an encoder: images.encoded) and written with one call per pixel row, or one
// call when the part spans the whole mosaic row.
void OutputLayout::write_mosaic_run(const ImageRun& images, int64_t first, int64_t count, FileWriter& out,
                                    bool bmp) const {
  if (images.encoded) {
    const EncodedRun& run = *images.encoded;
    for (int64_t k = 0; k < run.part_count; ++k) {
      const MosaicPart& part = run.parts[k];
      if (part.image >= images.encoded_from && part.image < images.encoded_from + count) {
        write_mosaic_part(part, run.bytes + part.at, out);
      }
    }
    return;
  }
  thread_local std::vector<unsigned char> rows;
  thread_local std::vector<unsigned char> scratch;  // (S, S, 3)
  const int size = image_size();
  scratch.resize(static_cast<size_t>(rgb8_image_bytes(size)));
  const RunPixels pixels = [&](int64_t image) { return images.rgb8_image(image, scratch.data()); };
  for_each_mosaic_part(first, count, [&](const MosaicPart& part) {
    rows.resize(static_cast<size_t>(part.span * size));
    fill_mosaic_part(part, bmp, size, size, pixels, rows.data());
    write_mosaic_part(part, rows.data(), out);
  });
}

void OutputLayout::for_each_mosaic_part(int64_t first, int64_t count,
                                        const std::function<void(const MosaicPart&)>& visit) const {
  const bool bmp = format_ == OutputFormat::Bmp;
  const int size = image_size();
  const auto [begin_file, end_file] = files_of(first, count);
  const size_t step = bmp ? 1 : 2;  // a mosaic PNG's files come in pairs: pixels, then the PNG
  for (size_t f = begin_file; f < end_file; f += step) {
    const OutputFile mosaic = file(f);
    const MosaicGrid& grid = mosaic.grid;
    const int64_t begin = std::max(first, mosaic.first);
    const int64_t end = std::min(first + count, mosaic.first + mosaic.count);
    const int64_t pitch = size + grid.padding;  // from one tile's left (top) edge to the next one's
    const int64_t height = grid.height();
    const int64_t header = static_cast<int64_t>(mosaic.header.size());
    MosaicPart part;
    part.file = f;
    part.row_bytes = bmp ? bmp_row_bytes(grid) : grid.width() * 3;  // one pixel row of the file
    part.tile_pitch = pitch * 3;
    for (int64_t n = begin; n < end;) {
      const int64_t tile = n - mosaic.first;  // the file's own numbering
      const int64_t tile_row = tile / grid.columns;
      const int64_t col = tile % grid.columns;
      part.tiles = std::min(end - n, grid.columns - col);
      part.span = (part.tiles * pitch - grid.padding) * 3;
      part.image = n - first;
      // The part's first row in the file: BMP's is the tile row's bottom pixel row.
      const int64_t top_row = grid.padding + tile_row * pitch;
      const int64_t file_row = bmp ? height - 1 - (top_row + size - 1) : top_row;
      part.offset = header + file_row * part.row_bytes + (grid.padding + col * pitch) * 3;
      visit(part);
      n += part.tiles;
    }
  }
}

void OutputLayout::write_mosaic_part(const MosaicPart& part, const unsigned char* rows, FileWriter& out) const {
  const int size = image_size();  // the part's pixel rows
  if (part.span == part.row_bytes) {
    out.write_at(part.file, part.offset, rows, part.span * size);
  } else {
    for (int r = 0; r < size; ++r) {
      out.write_at(part.file, part.offset + r * part.row_bytes, rows + r * part.span, part.span);
    }
  }
  out.images_written(part.file, part.tiles);
}

void image_to_rgb8(const float* image, int image_channels, int size, unsigned char* rgb) {
  const int pixels = size * size;
  if (image_channels == 1) {
    for (int k = 0; k < pixels; ++k) rgb[3 * k] = rgb[3 * k + 1] = rgb[3 * k + 2] = channel_to_byte(image[k]);
  } else {
    for (int k = 0; k < pixels * 3; ++k) rgb[k] = channel_to_byte(image[k]);
  }
}

void encode_tile_png(const unsigned char* rgb, int size, int level, std::string& png) {
  thread_png_encoder(level).encode(rgb, size, size, png);
}

void OutputLayout::write_png_files(const ImageRun& images, int64_t first, int64_t count, FileWriter& out) const {
  if (images.encoded) {  // each image's record is its PNG
    const int64_t* at = images.encoded->record_at + images.encoded_from;
    for (int64_t i = 0; i < count; ++i) put_png_file(first + i, images.encoded->bytes + at[i], at[i + 1] - at[i], out);
    return;
  }
  thread_local std::vector<unsigned char> scratch;  // (S, S, 3) RGB, a grey value repeated
  thread_local std::string png;
  scratch.resize(static_cast<size_t>(rgb8_image_bytes(image_size())));
  for (int64_t i = 0; i < count; ++i) {
    encode_tile_png(images.rgb8_image(i, scratch.data()), image_size(), options_.png_level, png);
    put_png_file(first + i, png.data(), static_cast<int64_t>(png.size()), out);
  }
}

void OutputLayout::put_png_file(int64_t index, const void* png, int64_t bytes, FileWriter& out) const {
  const std::string name = png_relative_path(index, total_, options_.png_layout, options_.facts);
  out.write_in_folder(0, name, prefix_ + "/" + name, std::string_view(static_cast<const char*>(png), static_cast<size_t>(bytes)));
  out.add_bytes(0, bytes);
}

int64_t OutputLayout::encode_png(size_t pixels, FileWriter& out, int threads) const {
  const OutputFile file = this->file(pixels);
  if (file.kind != OutputFile::Kind::Pixels) throw std::logic_error("encode_png of a file that holds no pixels");
  const std::string& path = out.temp_path(pixels);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw UserError("cannot read back the pixels of " + file.path + ": " + std::strerror(errno));
  void* map = ::mmap(nullptr, static_cast<size_t>(file.size), PROT_READ, MAP_SHARED, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  if (map == MAP_FAILED && map_errno == ENOMEM) throw std::bad_alloc();  // no address space: out of memory
  if (map == MAP_FAILED) throw UserError("cannot read back the pixels of " + file.path + ": " + std::strerror(map_errno));
  struct Unmap {  // on every way out, a failed write included
    void* map;
    size_t bytes;
    ~Unmap() { ::munmap(map, bytes); }
  } unmap{map, static_cast<size_t>(file.size)};
  return encode_png_from(pixels, static_cast<const unsigned char*>(map), out, threads);
}

int64_t OutputLayout::encode_png_from(size_t pixels, const unsigned char* rgb, FileWriter& out, int threads) const {
  const OutputFile file = this->file(pixels);
  if (file.kind != OutputFile::Kind::Pixels) throw std::logic_error("encode_png of a file that holds no pixels");
  int64_t written = 0;
  auto write = [&](const void* data, int64_t bytes) {
    out.write_at(pixels + 1, written, data, bytes);
    written += bytes;
  };
  encode_png_in_bands(rgb, file.grid.width(), file.grid.height(), options_.png_level, threads, write);
  out.file_complete(pixels + 1);
  return written;
}

void FileWriter::write_in_folder(size_t file, const std::string& name, const std::string& shown, std::string_view bytes) {
  write_whole_file(temp_path(file) + "/" + name, shown, bytes);
}

namespace {

// NumPy 1.0: the magic, the version, the header's length, then the dict padded with spaces and a
// newline so that the data starts on a 64-byte boundary.
std::string npy_file_header(const std::string& descr, int64_t total_images, int channels, int size) {
  const std::string side = std::to_string(size);
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + std::to_string(total_images) +
                     ", " + side + ", " + side + ", " + std::to_string(channels) + "), }";
  const size_t preamble = 10;
  const size_t header = dict.size() + 1;  // + '\n'
  const size_t padded = (preamble + header + 63) / 64 * 64 - preamble;
  dict.append(padded - header, ' ');
  dict.push_back('\n');
  std::string out = "\x93NUMPY";
  out.push_back(1);  // version 1.0
  out.push_back(0);
  out.push_back(static_cast<char>(padded & 0xff));  // header length, little-endian uint16
  out.push_back(static_cast<char>(padded >> 8));
  return out + dict;
}

}  // namespace

std::string npy_header(int64_t total_images, int image_channels, int size) {
  return npy_file_header("<f4", total_images, image_channels, size);
}

std::string npy_u8_header(int64_t total_images, int size) { return npy_file_header("|u1", total_images, 3, size); }

std::string shard_path(const std::string& prefix, const char* extension, int64_t shard, int64_t shards) {
  int digits = 6;
  for (int64_t limit = 1000000; limit < shards; limit *= 10) ++digits;
  char number[40];
  std::snprintf(number, sizeof number, "-%0*lld.", digits, static_cast<long long>(shard));
  return prefix + number + extension;
}

int64_t bmp_row_bytes(const MosaicGrid& grid) { return (grid.width() * 3 + 3) / 4 * 4; }

std::string bmp_header(const MosaicGrid& grid) {
  const int64_t pixel_bytes = bmp_row_bytes(grid) * grid.height();
  // BITMAPFILEHEADER + BITMAPINFOHEADER as stb_image_write fills them for 24-bit pictures: a
  // positive height (rows bottom-up), no compression, image size and resolution left 0.
  std::string header = "BM";
  put_u32(header, static_cast<uint32_t>(kBmpHeaderBytes + pixel_bytes));
  put_u16(header, 0);
  put_u16(header, 0);
  put_u32(header, kBmpHeaderBytes);
  put_u32(header, 40);
  put_u32(header, static_cast<uint32_t>(grid.width()));
  put_u32(header, static_cast<uint32_t>(grid.height()));
  put_u16(header, 1);   // planes
  put_u16(header, 24);  // bits per pixel
  for (int i = 0; i < 6; ++i) put_u32(header, 0);
  return header;
}

MosaicGrid mosaic_grid(int64_t images, int64_t columns, int64_t padding, int tile) {
  MosaicGrid grid;
  grid.tile = tile;
  grid.padding = images == 1 ? 0 : padding;  // make_grid returns a single image as it is
  if (columns == 0) {
    grid.columns = grid.rows = mosaic_side(images);
  } else {
    grid.columns = std::max<int64_t>(1, std::min(columns, images));
    grid.rows = (images + grid.columns - 1) / grid.columns;
  }
  return grid;
}

int64_t mosaic_side(int64_t n) {
  if (n < 0) throw std::invalid_argument("mosaic_side of a negative count");
  // The double square root is within one of the true root; fix it with exact integer squares.
  uint64_t root = static_cast<uint64_t>(std::sqrt(static_cast<double>(n)));
  const uint64_t target = static_cast<uint64_t>(n);
  while (root > 0 && root * root > target) --root;
  while ((root + 1) * (root + 1) <= target) ++root;
  return static_cast<int64_t>(root * root == target ? root : root + 1);
}

int64_t mosaic_file_count(int64_t total_images, int mosaic_tiles) {
  if (mosaic_tiles == 0 || total_images <= 1) return 1;
  const int64_t per_file = int64_t{mosaic_tiles} * mosaic_tiles;
  return (total_images + per_file - 1) / per_file;
}

bool is_numbered_mosaic_name(const std::string& name, const std::string& stem, const char* extension) {
  const std::string head = stem + "-", tail = std::string(".") + extension;
  return name.size() > head.size() + tail.size() && name.compare(0, head.size(), head) == 0 &&
         name.compare(name.size() - tail.size(), tail.size(), tail) == 0 &&
         name.substr(head.size(), name.size() - head.size() - tail.size()).find_first_not_of("0123456789") ==
             std::string::npos;
}

bool is_output_name(OutputFormat format, const std::string& stem, const std::string& name) {
  if (format == OutputFormat::Png) return name == stem;
  const char* extension = format_extension(format);
  if (name == stem + "." + extension && format != OutputFormat::Tar) return true;
  const bool numbered = format == OutputFormat::Bmp || format == OutputFormat::MosaicPng || is_sharded_format(format);
  return numbered && is_numbered_mosaic_name(name, stem, extension);
}

std::string mosaic_path(const std::string& prefix, const char* extension, int64_t file, int64_t files) {
  if (files == 1) return prefix + "." + extension;
  char number[32];
  std::snprintf(number, sizeof number, "-%04lld.", static_cast<long long>(file + 1));
  return prefix + number + extension;
}

std::string seed_image_key(uint64_t seed) {
  char key[32];
  std::snprintf(key, sizeof key, "seed%04llu", static_cast<unsigned long long>(seed));
  return key;
}

std::string png_file_name(int64_t index, int64_t total_images, const SampleFacts& facts) {
  if (facts.named_by_seed) return seed_image_key(facts.image_seed(index)) + ".png";
  char name[40];
  std::snprintf(name, sizeof name, "%0*lld.png", png_index_digits(total_images), static_cast<long long>(index));
  return name;
}

int png_index_digits(int64_t total_images) {
  int digits = 6;
  for (int64_t limit = 1000000; limit < total_images; limit *= 10) ++digits;
  return digits;
}

}  // namespace facegen
