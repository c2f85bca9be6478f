// output_format.hpp: each output format, defined once: its files, their headers and sizes, and how a
// run of consecutive images becomes bytes at known offsets. The output engine (engine/) writes these
// definitions, for one process and for each MPI rank's share alike, and the service makes them in
// memory (memory_output.hpp); neither knows a format, and both give the same bytes.
//
// Images are (count, S, S, nc) floats, C fastest, values in (-1, 1), S = 32, 64 or 128 pixels a side
// (OutputOptions::image_size, the model's), nc = 3 (RGB) or 1 (grey, OutputOptions::image_channels); a
// channel value v becomes the byte channel_to_byte(v) in the 8-bit formats, which are RGB always: a
// grey value is repeated in R, G and B. The formats:
//   txt         PREFIX.txt: "N\n", then one line per image: its S * S * nc values in (H, W, C) order, each
//               as printf's "%.4f " writes it, then "\n". Lines vary in length, so a run's bytes are
//               made first (format_text_run) and the driver places them after the bytes of every image
//               before the run (its running total, or an exclusive scan over ranks).
//   bmp         PREFIX.bmp: a 24-bit mosaic of tiles of S x S on a grid (MosaicGrid): by default s x s
//               tiles, s = ceil(sqrt(N)), no padding; with grid columns C, min(C, N) columns and as many
//               rows as the images need; with padding P, P black pixels between and around the tiles
//               (torchvision's make_grid(nrow=C, padding=P, pad_value=0); one image alone has no padding,
//               as make_grid returns it unchanged). Image n at tile row n / columns,
//               column n % columns; unused tiles black. A 54-byte header (the one stb_image_write writes),
//               then the pixels BGR, rows bottom-up, each padded to a multiple of 4 bytes. The file is
//               sized up front, so black tiles and padding read as zeros; a run of images becomes, per
//               tile row it touches, S pixel rows of its tiles at computed offsets.
//               Above mosaic_tiles^2 images the mosaic is split: PREFIX-0001.bmp, PREFIX-0002.bmp, ...,
//               file k holding images [(k-1) L, min(k L, N)), L = mosaic_tiles^2, as a mosaic (and grid)
//               of its own.
//   npy         PREFIX.npy: NumPy 1.0, float32 (N, S, S, nc), C order; fixed offsets.
//   png         PREFIX/ (a folder): one PNG per image, 000000.png, 000001.png, ... (more digits past a
//               million), or seed0042.png, ... where the run names images by seed (--seeds), in
//               subfolders with --png-layout subfolders (png_folder_layout.hpp); 8-bit RGB, each
//               encoded by PngEncoder (png_encoder.hpp) at --png-level and written whole.
//   npy-u8      PREFIX.u8.npy: NumPy 1.0, '|u1' (N, S, S, 3), C order, each channel_to_byte(v) (grey
//               repeated in R, G and B), the array ADM's evaluator and clean-fid read; fixed offsets.
//   tar         WebDataset shards PREFIX-000000.tar, PREFIX-000001.tar, ... (more digits past a million
//               shards): POSIX ustar archives (tar_shard.hpp), shard k holding images [k S, min((k+1) S, N)),
//               S = shard_images. Image n is the sample KKKKKKKKK (n in 9 digits, more past a billion; its
//               seed_image_key where the run names images by seed): the members KKKKKKKKK.png (the png
//               format's bytes) then KKKKKKKKK.json (its index, seed, model file name and XXH3-128,
//               precision), in index order; the last sample of a shard carries the archive's
//               end (two zero blocks). Samples vary in length: like txt's lines they are variable-length
//               records in numbered files (write_record_run).
//   Sharding    with shard_images S (--shard-images), npy and npy-u8 are split as tar is:
//               PREFIX-000000.npy, ... and PREFIX-000000.u8.npy, ..., each a complete array of its images.
//   mosaic-png  PREFIX.png (split as bmp is, PREFIX-0001.png, ...): the mosaic as an 8-bit RGB PNG. Its
//               encoder needs the whole picture, so the run's images go as 8-bit RGB rows, top-down, at
//               computed offsets into a scratch pixel file beside each PNG (the same placement as bmp),
//               and once every image is in, encode_png() compresses each pixel file into its PNG (in
//               bands of rows on several threads, the same bytes for any thread count). Under
//               MPI each rank encodes its share of the files, so every output works with every driver.
//
// A layout holds no list of its files: file k's path, header, size and images are computed when asked
// (file()), so that its memory does not depend on N, however many numbered files N calls for.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/model_spec.hpp"
#include "formats/encoded_run.hpp"
#include "formats/image_run.hpp"
#include "formats/png_folder_layout.hpp"
#include "formats/png_encoder.hpp"

namespace facegen {

enum class OutputFormat { Text, Bmp, Npy, Png, MosaicPng, NpyU8, Tar };
const std::vector<OutputFormat>& every_format();  // each once, for checks that know them all
std::vector<OutputFormat> parse_formats(const std::string& list);  // "txt,bmp" -> ...; UserError (a format twice too)
// "txt", "bmp", "npy", "png", "mosaic-png", "npy-u8", "tar"
const char* format_name(OutputFormat format);
// The extension of a format's file or of its numbered files: "txt", "npy", "bmp", "png", "u8.npy",
// "tar"; "" for the folder of PNGs.
const char* format_extension(OutputFormat format);

// BMP's own limit under stb_image_write, kept by every mosaic: a file of at most 2^31 - 1 bytes,
// 418 tiles per side.
constexpr int kMaxMosaicTiles = 418;
constexpr int kMaxGridPadding = 1024;  // --grid-padding, pixels
constexpr int64_t kDefaultShardImages = 10000;  // tar's samples per shard without --shard-images
constexpr int64_t kMaxShardImages = 2147483647;  // 2^31 - 1
// Whether --shard-images splits this format (tar, npy, npy-u8).
bool is_sharded_format(OutputFormat format);
// Whether an output is made of many files, each complete on its own, which a run with --resume puts
// in place as each is finished and a later run keeps: tar; png (its files, in groups); npy and npy-u8
// split by --shard-images (shard_images > 0). The others (txt, bmp, mosaic-png, unsplit npy) are made
// all or nothing.
bool is_made_of_many_files(OutputFormat format, int64_t shard_images);
// bmp, png, mosaic-png, tar, npy-u8: formats of 8-bit pixels only. When every format of a run is
// one of these, its images may come as 8-bit RGB (image_run.hpp).
bool is_eight_bit_format(OutputFormat format);
// The one decision of both drivers: a run's images are made as 8-bit RGB when every format it writes is
// 8-bit, else as float32.
ImageEncoding image_encoding_for(const std::vector<OutputFormat>& formats);

// Where the tiles of one mosaic file go: `columns` x `rows` tiles of tile x tile pixels (the images'
// size) with `padding` pixels between and around them, as torchvision's make_grid lays them out.
struct MosaicGrid {
  int64_t columns = 0;
  int64_t rows = 0;
  int64_t padding = 0;
  int64_t tile = 0;
  int64_t width() const { return columns * (tile + padding) + padding; }  // pixels
  int64_t height() const { return rows * (tile + padding) + padding; }
};
// The grid of a mosaic of `images` tiles of tile x tile pixels: `columns` 0 is the square s x s, s =
// ceil(sqrt(images)); otherwise min(columns, images) columns and ceil(images / that) rows. One image
// gets no padding (as make_grid returns a single image unchanged).
MosaicGrid mosaic_grid(int64_t images, int64_t columns, int64_t padding, int tile);

// One file (or folder) of an output.
struct OutputFile {
  enum class Kind {
    Data,    // written at offsets, renamed into place at commit
    Folder,  // a folder of whole files, renamed into place at commit
    Pixels,  // scratch: 8-bit RGB pixels of the mosaic PNG that follows it; never committed
    Encoded  // written by encode_png() from the pixel file before it, renamed into place at commit
  };
  Kind kind = Kind::Data;
  std::string path;      // the final path (a pixel file: its PNG's path, for messages)
  std::string header;    // bytes at offset 0
  int64_t size = -1;     // the whole file's size, known in advance; -1: it grows (text, tar, PNGs)
  int64_t first = 0;     // the images [first, first + count) of the run that it holds
  int64_t count = 0;
  MosaicGrid grid;       // mosaics: where the tiles go
  OutputFormat format = OutputFormat::Text;  // the output it belongs to
  // A folder: the longest path its files may have inside it, subfolder included (png_relative_path).
  size_t longest_name = 0;
};

// Where a format's bytes go: the temporary files of the output's files(), by index. Both drivers
// implement it; write_at may be called from several threads at once.
class FileWriter {
 public:
  virtual ~FileWriter() = default;
  // Throws UserError naming the output ("writing PATH failed: REASON").
  virtual void write_at(size_t file, int64_t offset, const void* data, int64_t bytes) = 0;
  // The temporary file or folder that file `file` is being built in, for whole-file writes (a driver
  // that creates its files as they are needed creates it now).
  virtual const std::string& temp_path(size_t file) = 0;
  // `count` images are complete in `file` (their every byte written): a driver may close a file once
  // all of its images are in.
  virtual void images_written(size_t file, int64_t count) { (void)file, (void)count; }
  // Counts bytes written into the folder `file` by whole-file writes (png).
  virtual void add_bytes(size_t file, int64_t bytes) { (void)file, (void)bytes; }
  // Every byte of `file` is written (an encoded PNG): a driver may sync and close it now.
  virtual void file_complete(size_t file) { (void)file; }
  // One whole file `name` (no directory) of the folder `file` (png), `shown` its final path for
  // messages. By default a new file in temp_path(file); a driver that keeps its outputs in memory
  // keeps the bytes instead.
  virtual void write_in_folder(size_t file, const std::string& name, const std::string& shown, std::string_view bytes);
};

// What a tar sample's json says of its image besides the index, from the run, and how the run names
// its images.
struct SampleFacts {
  // The model by what decides the bytes, not by where it was installed: its file name, no folder
  // ("" for synthetic images), and its file's XXH3-128 in 32 hex digits (common/content_hash.hpp;
  // what xxh128sum prints; "" where unknown: synthetic images, a model read from a pipe).
  std::string model;
  std::string model_xxh3;
  std::string precision;  // "fp32", "tf32", "bf16"
  bool random = false;    // latents drawn from random_seed (--random, --interpolate), not read from a file
  uint64_t random_seed = 0;
  // The image's own seed, where images have one (a seed per image): written as "seed". Unset: none.
  std::function<uint64_t(int64_t index)> image_seed;
  double truncation = 0;  // drawn latents within [-T, T] (--truncation), written beside the seed; 0: none
  // The batch tool's --seeds: each image is named by its seed (seed_image_key) in the png folder and
  // as its tar sample's key, rather than by its index (image_seed is then set, and no seed repeats).
  bool named_by_seed = false;
};

struct OutputOptions {
  int mosaic_tiles = 128;  // largest mosaic file, in tiles per side (8,192 x 8,192 pixels); 0: never split
  int64_t grid_columns = 0;  // mosaics: tiles per row; 0: a square grid
  int64_t grid_padding = 0;  // mosaics: black pixels between and around the tiles
  int image_channels = 3;    // nc of the images: 3 (RGB) or 1 (grey)
  int image_size = kDefaultImageSize;  // pixels a side: the model's image_size (32, 64 or 128)
  int64_t shard_images = 0;  // tar, npy, npy-u8: images per shard; 0: tar's kDefaultShardImages, npy unsplit
  SampleFacts facts;         // tar: each sample's json
  int png_level = kDefaultPngLevel;  // png, mosaic-png: 0 (stored) .. kMaxPngLevel
  // --resume: the PNG folder's unit where no format is sharded, the images of a group of its files put
  // in place and recorded together (0: the folder is one output, put in place at the commit).
  int64_t png_group_images = 0;
  PngLayout png_layout = PngLayout::Flat;  // png: the files in the folder itself or in subfolders
  std::function<void(const std::string&)> on_notice;  // told once, e.g. that a mosaic is split
};

class OutputLayout {
 public:
  // Checks what can be checked before any work: the tile limit, BMP's 2 GiB. Throws UserError.
  OutputLayout(OutputFormat format, const std::string& prefix, int64_t total_images, const OutputOptions& options);

  OutputFormat format() const { return format_; }
  int64_t total_images() const { return total_; }
  int image_channels() const { return options_.image_channels; }  // nc
  int image_size() const { return options_.image_size; }          // pixels a side
  PngLayout png_layout() const { return options_.png_layout; }
  const SampleFacts& facts() const { return options_.facts; }
  int64_t image_values() const {                                  // floats per image
    return int64_t{options_.image_size} * options_.image_size * options_.image_channels;
  }
  // The output's files, numbered from 0, each computed when asked (O(1) memory whatever N is). A
  // mosaic PNG's files come in pairs: 2k the pixels of mosaic k, 2k + 1 its PNG.
  size_t file_count() const;
  OutputFile file(size_t index) const;
  // The files that images [first, first + count) land in: [begin, end) of file().
  std::pair<size_t, size_t> files_of(int64_t first, int64_t count) const;
  std::string describe() const;  // the path for messages: "r.bmp", "r-0001.bmp ... r-0003.bmp (3 files)", "r/"
  // Whether `name` (in the prefix's folder, no directory) is one of this output's final paths.
  bool writes_name(const std::string& name) const;

  // Every format but txt: writes images [first, first + count) of the run, (count, S, S, nc), at their
  // offsets through `out`. Any thread; several threads may write disjoint runs at once.
  // images: float32 values, or 8-bit RGB pixels for the 8-bit formats (image_run.hpp).
  void write_run(const ImageRun& images, int64_t first, int64_t count, FileWriter& out) const;
  void write_run(const float* images, int64_t first, int64_t count, FileWriter& out) const {
    write_run(ImageRun::floats(images, image_channels(), image_size()), first, count, out);
  }
  // The same run written by `threads` threads (both drivers call this), split where each piece takes
  // the fewest write calls: a mosaic into pieces of at most one tile row, so that every whole row of
  // tiles is converted by one thread and written with one call (S pixel rows are contiguous in the
  // file), rather than one call per pixel row of a few tiles from every thread into one file.
  void write_run_threaded(const ImageRun& images, int64_t first, int64_t count, FileWriter& out, int threads) const;
  void write_run_threaded(const float* images, int64_t first, int64_t count, FileWriter& out, int threads) const {
    write_run_threaded(ImageRun::floats(images, image_channels(), image_size()), first, count, out, threads);
  }

  // Runs that come already in this output's bytes (formats/encoded_run.hpp), made by an encoder from
  // the pixels: Records for png and tar at PNG level 0; Parts for bmp and mosaic-png (its pixel files)
  // where the grid's padding is at most a quarter of a tile, so that the parts' bytes stay near the
  // pixels'; None for the others, which are written from the pixels.
  EncodedKind encoded_kind() const;
  // The memory a run of at most `images` images takes encoded (encoded_kind() not None).
  EncodedCapacity encoded_capacity(int64_t images) const;
  // The plan of images [first, first + count) (a run that write_run takes) into `memory`, for an encoder
  // to fill in; on up to `threads` threads. write_run and the formats of records write the run from it
  // when an ImageRun's `encoded` points to it.
  void plan_encoded_run(int64_t first, int64_t count, const EncodedMemory& memory, EncodedRun& run, int threads) const;
  int image_height() const { return options_.image_size; }  // pixels of each image
  int image_width() const { return options_.image_size; }

  // txt: where the lines start (after "N\n").
  int64_t text_data_offset() const { return header_bytes_; }

  // The formats of variable-length records (txt, tar): each image's bytes are made first, then placed
  // after every byte before them in its file (write_record_run).
  bool writes_records() const { return format_ == OutputFormat::Text || format_ == OutputFormat::Tar; }
  // Appends the record of image `index`, image i of `images`, to block from `used` on, growing it as
  // need be; returns the new end. Any thread.
  size_t append_record(const ImageRun& images, int64_t i, int64_t index, std::vector<char>& block, size_t used) const;
  size_t file_of_image(int64_t index) const;  // the file that holds image `index`

  // mosaic-png: encodes the pixel file files()[pixels] into the PNG files()[pixels + 1] through
  // `out` on `threads` threads (<= 0: every CPU), after every image was written. Returns the PNG's bytes.
  int64_t encode_png(size_t pixels, FileWriter& out, int threads) const;
  // The same from the pixels themselves, (height, width, 3) of file `pixels`'s grid, wherever they are.
  int64_t encode_png_from(size_t pixels, const unsigned char* rgb, FileWriter& out, int threads) const;

  // Bytes of the output once complete, when known in advance (bmp, npy); -1 otherwise.
  int64_t known_bytes() const;

 private:
  void write_mosaic_run(const ImageRun& images, int64_t first, int64_t count, FileWriter& out, bool bmp) const;
  // The parts of images [first, first + count) of a mosaic: per file, per tile row, the run's tiles in it.
  void for_each_mosaic_part(int64_t first, int64_t count, const std::function<void(const MosaicPart&)>& visit) const;
  void write_mosaic_part(const MosaicPart& part, const unsigned char* rows, FileWriter& out) const;
  void write_png_files(const ImageRun& images, int64_t first, int64_t count, FileWriter& out) const;
  void put_png_file(int64_t index, const void* png, int64_t bytes, FileWriter& out) const;  // image index's file
  void plan_tar_run(int64_t first, int64_t count, const EncodedMemory& memory, EncodedRun& run, int threads) const;
  // tar: whether image `index` is its shard's last, whose sample carries the archive's end.
  bool ends_shard(int64_t index) const { return (index + 1) % per_file_ == 0 || index == total_ - 1; }

  void write_sharded_array_run(const ImageRun& images, int64_t first, int64_t count, FileWriter& out) const;
  int64_t shard_count() const;    // shard files (1 for an unsharded format)
  std::string shard_file_path(int64_t shard) const;
  int64_t mosaic_count() const;   // mosaic files (1 for the other formats)
  std::string mosaic_file_path(int64_t mosaic) const;

  OutputFormat format_;
  std::string prefix_;
  int64_t total_;
  int64_t per_file_ = 0;      // mosaics and shards: images per file but the last (0: one file)
  int64_t header_bytes_ = 0;  // txt, npy: the header's bytes
  OutputOptions options_;
};

// Variable-length records in numbered files (txt: one file, its lines; tar: a file per shard, its
// samples), made before they are placed. make() makes the records of images [first, first + count)
// (images: float32 values, or 8-bit pixels for tar) on up to `threads` threads, into blocks kept for
// the next make(); file_bytes()[k] is then the run's bytes in file files.first + k, where `files`
// covers files_of(first, count) and may be wider (an MPI round's files over every rank). Once the
// driver knows where the run's records start in each file (start[k]: after the bytes before them),
// write() writes them there through `out`, in parallel, one call per piece and file, and
// images_written() tells each file its images.
class RecordRun {
 public:
  // images.encoded: the records are already made there (formats/encoded_run.hpp), and are taken as they are.
  void make(const OutputLayout& layout, const ImageRun& images, int64_t first, int64_t count,
            std::pair<size_t, size_t> files, int threads);
  const std::vector<int64_t>& file_bytes() const { return file_bytes_; }
  int64_t bytes() const { return bytes_; }
  void write(const std::vector<int64_t>& start, FileWriter& out, int threads) const;

 private:
  void make_records(const OutputLayout& layout, const ImageRun& images, int64_t first, int64_t count, int threads);

  const OutputLayout* layout_ = nullptr;
  int64_t first_ = 0, count_ = 0, pieces_ = 0, bytes_ = 0;
  std::pair<size_t, size_t> files_;
  std::vector<std::vector<char>> blocks_;  // one per piece of the run, kept between runs
  const unsigned char* encoded_ = nullptr; // or the run's records, back to back, made by an encoder
  std::vector<int64_t> record_bytes_;      // (count): each image's record
  std::vector<int64_t> record_at_;         // (count): where it starts among the run's records of its file
  std::vector<int64_t> file_bytes_;        // per file of files_
};

// make(), then place(file_bytes()) (called exactly once, also for an empty run: MPI ranks exchange
// byte counts in it), then write() at what it returns. Returns the run's bytes.
using RecordPlace = std::function<std::vector<int64_t>(const std::vector<int64_t>& bytes)>;
int64_t write_record_run(const OutputLayout& layout, const ImageRun& images, int64_t first, int64_t count,
                         std::pair<size_t, size_t> files, int threads, RecordRun& run, const RecordPlace& place,
                         FileWriter& out);

// Where the next records of each file go, for a driver that writes runs in order: a file's first
// records start after its header; each run's records follow the run before. Holds only the files
// that runs are still reaching.
class RecordEnds {
 public:
  explicit RecordEnds(const OutputLayout& layout) : layout_(layout) {}
  // before[k]: bytes of the run that go before this writer's in file files.first + k (earlier ranks);
  // run[k]: the whole run's bytes there. Returns where this writer's records start in each file.
  std::vector<int64_t> place(std::pair<size_t, size_t> files, const std::vector<int64_t>& before,
                             const std::vector<int64_t>& run);

 private:
  const OutputLayout& layout_;
  std::vector<std::pair<size_t, int64_t>> ends_;  // (file, its end so far), files in order
};

// txt alone, for tests and benchmarks: the lines of a run of images (count, size, size, channels),
// placed by `place(run_bytes)`, which returns where the run's text starts in the file (file 0 of `out`).
int64_t write_text_run(const float* images, int64_t count, int threads, RecordRun& run,
                       const std::function<int64_t(int64_t)>& place, FileWriter& out, int channels, int size);

// The pieces of each format, shared with tests and benchmarks.
// Padded so that the data starts on a 64-byte boundary; shape (N, size, size, image_channels).
std::string npy_header(int64_t total_images, int image_channels, int size);
std::string npy_u8_header(int64_t total_images, int size);  // '|u1', shape (N, size, size, 3)
// A shard's path, k from 0: PREFIX-000000.EXT, ... (more digits past a million shards).
std::string shard_path(const std::string& prefix, const char* extension, int64_t shard, int64_t shards);
// One image's PNG, as the png format writes it: the bytes of its size x size RGB pixels encoded.
void encode_tile_png(const unsigned char* rgb, int size, int level, std::string& png);
std::string bmp_header(const MosaicGrid& grid);  // the 54 bytes of a mosaic on this grid
int64_t bmp_row_bytes(const MosaicGrid& grid);   // one pixel row, padded to a multiple of 4
// Mosaic files for N images at most mosaic_tiles^2 a file (0: one file), and the path of file k of
// them (from 0): PREFIX.EXT when there is one, else PREFIX-0001.EXT, PREFIX-0002.EXT, ...
int64_t mosaic_file_count(int64_t total_images, int mosaic_tiles);
std::string mosaic_path(const std::string& prefix, const char* extension, int64_t file, int64_t files);
// Whether a file name (no directory) is one of mosaic_path's numbered names for the prefix whose
// last part is `stem`: STEM-<digits>.EXT.
bool is_numbered_mosaic_name(const std::string& name, const std::string& stem, const char* extension);
// The name of an image that the run names by its seed (SampleFacts::named_by_seed): "seed" then the
// seed in at least 4 digits, as StyleGAN's gen_images.py names its files: seed0042, seed123456.
std::string seed_image_key(uint64_t seed);
constexpr size_t kLongestSeedPngName = 28;  // "seed18446744073709551615.png"
// Image `index`'s file in the png folder: seed_image_key(seed) + ".png" where the run names images by
// seed, else the index in 6 digits (more past a million images): "000042.png", "seed0042.png".
std::string png_file_name(int64_t index, int64_t total_images, const SampleFacts& facts);
int png_index_digits(int64_t total_images);  // the digits of png_file_name's index names: 6, more past a million
// Whether a file name (no directory) is one that `format` writes for a prefix whose last part is
// `stem`, for some number of images: STEM.txt; STEM.bmp or a numbered STEM-<digits>.bmp; the folder STEM; ...
bool is_output_name(OutputFormat format, const std::string& stem, const std::string& name);
// Bound on one formatted line of `values` values: every value at its longest ("%.4f " of -FLT_MAX is
// 46 characters), then "\n". Values in (-1, 1) take 7 or 8 characters each.
constexpr size_t max_image_text_bytes(int64_t values) { return static_cast<size_t>(values) * 46 + 1; }
// One line of `values` values (size * size * nc) with its "\n"; returns bytes.
size_t format_image_text(const float* image, char* out, int64_t values);
size_t format_value_text(float v, char* out);  // printf("%.4f ", v) exactly, at most 46 bytes, no NUL
// (v + 1) / 2 * 255 in float, truncated toward zero, clamped to [0, 255], NaN to 0. Inline and
// written with selects, so that the loops of every 8-bit format vectorise.
inline unsigned char channel_to_byte(float v) {
  const float scaled = (v + 1.0f) / 2.0f * 255.0f;
  float c = scaled > 0.0f ? scaled : 0.0f;  // NaN too
  c = c < 255.0f ? c : 255.0f;
  return static_cast<unsigned char>(static_cast<int>(c));
}
int64_t mosaic_side(int64_t n);  // ceil(sqrt(n)), exact for every n >= 0

}  // namespace facegen
