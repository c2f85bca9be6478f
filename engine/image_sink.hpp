// image_sink.hpp: where one process's generated images go: one sink per output format, each the
// single-process driver of that format's definition (output_format.hpp) over OutputFiles (pwrite from
// several threads).
//
// The pipeline hands a sink consecutive runs of images in order: append(images, first, count) with
// images (count, S, S, nc), C fastest, values in (-1, 1) (or their 8-bit RGB pixels). finish() writes what is left (a mosaic PNG
// is encoded then) and syncs every byte; commit_sinks() then puts the outputs of all sinks in place
// all together or not at all. Destroying a sink that was not committed leaves no file behind.
#pragma once

#include <climits>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "formats/image_run.hpp"
#include "commit/output_commit.hpp"
#include "formats/output_format.hpp"

namespace facegen {

class ResumeFiles;  // engine/resume_files.hpp

class ImageSink {
 public:
  virtual ~ImageSink() = default;
  // images: float32 values, or 8-bit RGB pixels where the sink's format is 8-bit (image_run.hpp).
  virtual void append(const ImageRun& images, int64_t first, int64_t count) = 0;
  void append(const float* images, int64_t first, int64_t count) {
    append(ImageRun::floats(images, image_channels(), image_size()), first, count);
  }
  virtual int image_channels() const = 0;  // nc of the float32 images it takes
  virtual int image_size() const = 0;      // their pixels a side
  // Every byte written and on disk; returns the renames that put the output in place.
  virtual std::vector<PendingRename> finish() = 0;
  virtual void committed() {}  // the renames of finish() are done
  virtual std::string path() const = 0;  // the final path, for messages
  virtual int64_t bytes_written() const { return 0; }  // bytes of every file written so far
  // The paths the output puts in place (each numbered mosaic file, the PNG folder), for the summary's
  // sizes on disk: a mosaic's unused tiles are never written yet take their place in the file.
  virtual std::vector<std::string> final_paths() const { return {}; }
  void commit();  // this sink alone: finish(), then commit_sinks({this})
  // The temporary folder that a folder of PNGs is being made in ("" for other outputs, or before).
  virtual std::string temp_folder() const { return ""; }
  // The temporary path of the first file this sink made ("" where it made none).
  virtual std::string first_temp() const { return ""; }
  // The format definition it writes, where it writes one: the output engine plans the runs that an
  // encoder makes from it (formats/encoded_run.hpp), which make_run() and write_run() then write.
  virtual const OutputLayout* layout() const { return nullptr; }

  // The steps of append() as the output engine takes them (engine/output_engine.hpp), so that it
  // writes several runs of a sink at once, but never two into one file (the kernel takes one writer
  // into a file at a time, and writers that wait spin). A run writes into write_file(first) (one file
  // of records, which a run never spans; a run of another format may reach into the next file, and a
  // folder of PNGs gives each run a file of its own). make_run() does what needs no other run (a
  // format of records makes its records, into `records`, and returns their bytes), on any thread, in
  // any order. The engine then places a file's runs in the order it was given them, each after the
  // one before (the first after write_file_begin() bytes), and write_run() writes each, one at a
  // time per file; write_file_images() says when a file has had all its runs. By default a sink is
  // one file that append() writes in the ordered step, which is what a sink that knows nothing of the
  // engine needs.
  virtual int64_t write_file(int64_t first) const { (void)first; return 0; }
  virtual int64_t write_file_begin(int64_t file) const { (void)file; return 0; }
  virtual int64_t write_file_images(int64_t file) const { (void)file; return INT64_MAX; }
  virtual int64_t make_run(const ImageRun& images, int64_t first, int64_t count, RecordRun& records, int threads) {
    (void)images, (void)first, (void)count, (void)records, (void)threads;
    return 0;
  }
  virtual void write_run(const ImageRun& images, int64_t first, int64_t count, const RecordRun& records, int64_t start,
                         int threads) {
    (void)records, (void)start, (void)threads;
    append(images, first, count);
  }
};

// finish() on every sink, then every rename at once (commit_all_or_nothing), then committed().
// Throws UserError; the old outputs are then all as they were.
void commit_sinks(const std::vector<ImageSink*>& sinks);

// How sinks may spend the machine: writer threads, and the mosaic's size limit.
struct SinkOptions {
  // Threads that format, encode and write each run (pwrite from each); 0: every CPU available_cpus() finds.
  int threads = 0;
  // Largest mosaic file, in tiles per side. N above its square splits into numbered files.
  int mosaic_tiles = 128;  // 8,192 x 8,192 pixels, 16,384 images, 201 MB of pixels per file
  // Each mosaic file's grid (torchvision's make_grid(nrow, padding)): tiles per row (0: a square) and
  // black pixels between and around the tiles.
  int64_t grid_columns = 0;
  int64_t grid_padding = 0;
  int image_channels = 3;  // nc of the images: 3 (RGB) or 1 (grey, written as grey RGB in BMP and PNG)
  int image_size = kDefaultImageSize;  // their pixels a side: the model's image_size
  int64_t shard_images = 0;  // --shard-images: tar's samples per shard, npy's images per file (0: tar's default)
  SampleFacts facts;         // what each tar sample's json says besides its index
  int png_level = kDefaultPngLevel;  // png and mosaic-png: 0 (stored) .. kMaxPngLevel (png_encoder.hpp)
  PngLayout png_layout = PngLayout::Flat;  // png: its files in the folder itself or in subfolders
  std::function<void(const std::string&)> on_notice;  // told once, e.g. that a mosaic is split
  // An MPI rank's share of the output: the images [share_first, share_end) (share_end < 0: all of
  // them) and the files they land in, which the sink makes and no other rank touches
  // (mpi/rank_job.cpp splits the job at the files' edges); a rank's folder of PNGs is rank 0's
  // (shared_folder: its temporary path), which the other ranks write into.
  int64_t share_first = 0;
  int64_t share_end = -1;
  std::string shared_folder;
  // --resume (engine/resume_files.hpp): each file is put in place and recorded as soon as it is
  // complete (a PNG folder's files in groups of the job's unit), nothing is left for the commit, and
  // the runs of a unit whose files this output keeps are passed over. Null: all or nothing.
  ResumeFiles* resume = nullptr;
  int64_t png_group_images = 0;  // --resume: the PNG folder's unit where no format is sharded
};

// The layout options of the output formats that these sink options ask for.
OutputOptions output_options(const SinkOptions& options);

// The sink of one format for N images: PREFIX.txt, PREFIX.bmp (or PREFIX-0001.bmp, ...), PREFIX.npy,
// PREFIX/ (png), PREFIX.png (or PREFIX-0001.png, ...), PREFIX.u8.npy, PREFIX-000000.tar, ... The first file exists (as a temporary) on return,
// the others from their first image on.
std::unique_ptr<ImageSink> make_sink(OutputFormat format, const std::string& prefix, int64_t total_images,
                                     const SinkOptions& options = {});

// The same, by file name, for tests and benchmarks: path "r.txt" is prefix "r".
std::unique_ptr<ImageSink> make_text_sink(const std::string& path, int64_t total_images,
                                          const SinkOptions& options = {});
std::unique_ptr<ImageSink> make_npy_sink(const std::string& path, int64_t total_images);
std::unique_ptr<ImageSink> make_bmp_mosaic_sink(const std::string& path, int64_t total_images);  // never split
enum class MosaicEncoding { Bmp, Png };
std::unique_ptr<ImageSink> make_mosaic_sink(MosaicEncoding encoding, const std::string& prefix, int64_t total_images,
                                             const SinkOptions& options);
std::unique_ptr<ImageSink> make_png_folder_sink(const std::string& folder, int64_t total_images,
                                                const SinkOptions& options = {});

}  // namespace facegen
