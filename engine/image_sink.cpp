// image_sink.cpp: the single-process driver of every output format (see image_sink.hpp).
//
// Records (txt lines, tar samples) are made on several threads, placed at the running end of their
// file and written by one thread (through OutputFiles: pwrite); images at fixed offsets are written
// by one thread too, a folder of PNGs by several (each image is a file of its own): by append() in
// sub-runs of a few images per thread, so that the records' buffers stay small whatever the run, or
// by the output engine, which takes the same steps for several runs at once.
#include "engine/image_sink.hpp"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "common/model_shape.hpp"
#include "common/threads.hpp"
#include "common/temp_registry.hpp"
#include "engine/folder_files.hpp"
#include "engine/output_files.hpp"
#include "engine/resume_files.hpp"

namespace facegen {
namespace {

// Images per thread in one sub-run of records: about 1.6 MB of text, or 2.4 MB of tar samples
// (about 9 KB each), per thread.
constexpr int64_t kTextImagesPerThread = 16;
constexpr int64_t kTarImagesPerThread = 256;

class FormatSink : public ImageSink {
 public:
  FormatSink(OutputLayout layout, const SinkOptions& options)
      : layout_(std::move(layout)),
        files_(FileList{layout_.file_count(), [this](size_t file) { return layout_.file(file); }}),
        threads_(resolve_threads(options.threads)),
        share_first_(options.share_first),
        share_end_(options.share_end < 0 ? layout_.total_images() : options.share_end),
        resume_(options.resume) {
    const int64_t images = std::max<int64_t>(0, share_end_ - share_first_);
    owned_ = layout_.total_images() == 0 ? std::pair<size_t, size_t>{0, 1} : layout_.files_of(share_first_, images);
    files_.own_only(owned_.first, owned_.second);
    if (resume_) {
      // Made as their first image comes (the first may be kept); the manifest, written before,
      // showed that the directory takes files. A shard's number is its unit's.
      files_.place_when_complete([this](size_t file) { resume_->record(layout_.format(), static_cast<int64_t>(file)); });
      return;
    }
    // The first file now, so that a directory that cannot take it fails before any computing; the
    // others (numbered mosaics, shards) as their first image comes.
    if (layout_.format() == OutputFormat::Png && !options.shared_folder.empty() && images > 0) {
      files_.adopt_folder(0, options.shared_folder);
      folder_ = options.shared_folder;
    } else if (owned_.second > owned_.first) {
      first_temp_ = files_.create(owned_.first);
      if (layout_.format() == OutputFormat::Png) folder_ = first_temp_;
    }
  }

  using ImageSink::append;
  int image_channels() const override { return layout_.image_channels(); }
  int image_size() const override { return layout_.image_size(); }

  // In order, run after run: the engine's steps one after the other, a file of records at a time.
  void append(const ImageRun& images, int64_t first, int64_t count) override {
    const int64_t total = layout_.total_images();
    if (first != appended_ || count < 0 || count > total - appended_) {
      throw std::logic_error("sink " + path() + ": got images [" + std::to_string(first) + ", " +
                             std::to_string(first + count) + ") after " + std::to_string(appended_) + " of " +
                             std::to_string(total) + "; runs must be consecutive and in order");
    }
    if (!layout_.writes_records()) {
      write_run(images, first, count, record_run_, 0, threads_);
    } else {
      // Sub-runs of a few images per thread, so the records' buffers stay small whatever the run.
      const int64_t step =
          (layout_.format() == OutputFormat::Text ? kTextImagesPerThread : kTarImagesPerThread) * threads_;
      for (int64_t done = 0; done < count;) {
        const int64_t file = write_file(first + done);
        const OutputFile spec = layout_.file(static_cast<size_t>(file));
        const int64_t run = std::min({step, count - done, spec.first + spec.count - (first + done)});
        const ImageRun part = images.skip(done);
        const int64_t bytes = make_run(part, first + done, run, record_run_, threads_);
        if (file != end_file_) {
          end_file_ = file;
          end_ = write_file_begin(file);
        }
        write_run(part, first + done, run, record_run_, end_, threads_);
        end_ += bytes;
        done += run;
      }
    }
    appended_ += count;
  }

  // A file of records; a PNG of its own (a folder of PNGs: runs never share a file); else the file
  // that the run's first image is in.
  int64_t write_file(int64_t first) const override {
    if (layout_.format() == OutputFormat::Png) return first;
    return static_cast<int64_t>(layout_.writes_records() ? layout_.file_of_image(first) : layout_.files_of(first, 1).first);
  }
  int64_t write_file_begin(int64_t file) const override {
    if (!layout_.writes_records()) return 0;
    return static_cast<int64_t>(layout_.file(static_cast<size_t>(file)).header.size());
  }
  int64_t write_file_images(int64_t file) const override {
    if (layout_.format() == OutputFormat::Png) return 1;  // each run its own: done with its first
    const OutputFile spec = layout_.file(static_cast<size_t>(file));
    return spec.count > 0 ? spec.count : INT64_MAX;  // a mosaic PNG's encoded file takes no runs
  }

  int64_t make_run(const ImageRun& images, int64_t first, int64_t count, RecordRun& records, int threads) override {
    if (!layout_.writes_records() || kept_unit(first)) return 0;  // written whole in write_run, or kept
    records.make(layout_, images, first, count, layout_.files_of(first, count), threads);
    return records.bytes();
  }

  // One thread writes: the engine runs one write into a file at a time, and so does append(). A folder
  // of PNGs, whose runs never share a file, writes its images' files on `threads` threads.
  void write_run(const ImageRun& images, int64_t first, int64_t count, const RecordRun& records, int64_t start,
                 int threads) override {
    if (kept_unit(first)) {
      written_ += count;
      return;
    }
    if (layout_.writes_records()) {
      records.write({start}, files_, 1);
    } else if (layout_.format() == OutputFormat::Png) {
      write_png_files(images, first, count, threads);
      if (resume_) place_pngs_when_complete(first, count);
    } else {
      layout_.write_run_threaded(images, first, count, files_, 1);
    }
    written_ += count;
  }

  std::vector<PendingRename> finish() override {
    if (resume_ && !group_images_.empty()) {
      throw std::logic_error("sink " + path() + ": " + std::to_string(group_images_.size()) +
                             " group(s) of PNGs begun and never complete");
    }
    if (!resume_ && written_ != share_end_ - share_first_) {
      throw std::logic_error("sink " + path() + ": commit after " + std::to_string(written_) + " of " +
                             std::to_string(share_end_ - share_first_) + " images");
    }
    // One mosaic PNG at a time: each maps its pixels (up to 201 MB) and holds a few bands a thread.
    if (layout_.format() == OutputFormat::MosaicPng) {
      for (size_t k = owned_.first; k < owned_.second; k += 2) layout_.encode_png(k, files_, threads_);
    }
    record_run_ = RecordRun();
    files_.finish();
    return files_.renames();
  }

  void committed() override { files_.mark_committed(); }
  std::string temp_folder() const override { return folder_; }
  std::string first_temp() const override { return first_temp_; }
  const OutputLayout* layout() const override { return &layout_; }
  std::string path() const override { return layout_.describe(); }
  int64_t bytes_written() const override { return files_.bytes_written(); }
  std::vector<std::string> final_paths() const override {
    std::vector<std::string> paths;
    if (resume_) {  // every file of the output, kept or made
      for (size_t k = 0; k < layout_.file_count(); ++k) paths.push_back(layout_.file(k).path);
      return paths;
    }
    for (const PendingRename& rename : files_.renames()) paths.push_back(rename.final);
    return paths;
  }

 private:
  // --resume: whether the run's images (never two units') land in a unit whose files this output keeps.
  bool kept_unit(int64_t first) const { return resume_ && resume_->kept(layout_.format(), first / resume_->unit_images()); }

  // A run of a folder's PNGs, each image a file of its own, on the threads that the folder's lock
  // rewards (png_folder_writers), each holding one TempCreation around a few files instead of one a
  // file (a signal's cleanup waits for it: a few milliseconds).
  void write_png_files(const ImageRun& images, int64_t first, int64_t count, int threads) {
    constexpr int64_t kFilesPerCreation = 32;
    parallel_for(count, png_folder_writers(layout_.png_layout(), threads), [&](int64_t begin, int64_t end) {
      for (int64_t done = begin; done < end; done += kFilesPerCreation) {
        TempCreation creating;
        const int64_t files = std::min(kFilesPerCreation, end - done);
        layout_.write_run(images.skip(done), first + done, files, files_);
      }
    });
  }

  // --resume, png: once every image of the unit of [first, first + count) is written, its PNGs go into
  // the final folder and are recorded.
  void place_pngs_when_complete(int64_t first, int64_t count) {
    const int64_t unit = first / resume_->unit_images();
    const int64_t unit_first = unit * resume_->unit_images();
    const int64_t unit_end = std::min(layout_.total_images(), unit_first + resume_->unit_images());
    {
      std::lock_guard<std::mutex> lock(groups_mutex_);
      int64_t& written = group_images_[unit];
      written += count;
      if (written < unit_end - unit_first) return;
      group_images_.erase(unit);
    }
    std::vector<std::string> names;
    for (int64_t i = unit_first; i < unit_end; ++i) {
      names.push_back(png_relative_path(i, layout_.total_images(), layout_.png_layout(), layout_.facts()));
    }
    files_.place_in_folder(0, names);
    resume_->record(OutputFormat::Png, unit);
  }

  OutputLayout layout_;
  OutputFiles files_;
  int threads_;
  int64_t share_first_, share_end_;  // the images this sink writes (SinkOptions' share)
  std::pair<size_t, size_t> owned_;  // and the files they land in, which it makes
  std::string folder_;               // png: the temporary folder
  std::string first_temp_;           // the first file made, at construction
  std::atomic<int64_t> written_{0};  // images written, by append() or the engine's steps
  int64_t appended_ = 0;             // images given to append()
  RecordRun record_run_;    // append()'s records
  int64_t end_file_ = -1;   // append(): the file of records being written, and where its next go
  int64_t end_ = 0;
  ResumeFiles* resume_;     // --resume, else null
  std::mutex groups_mutex_;
  std::map<int64_t, int64_t> group_images_;  // --resume, png: images written of each unit begun
};

std::string without_extension(const std::string& path, const char* extension) {
  const std::string suffix = std::string(".") + extension;
  if (path.size() < suffix.size() || path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0) {
    throw std::invalid_argument("output path " + path + " does not end in " + suffix);
  }
  return path.substr(0, path.size() - suffix.size());
}

}  // namespace

void ImageSink::commit() { commit_sinks({this}); }

void commit_sinks(const std::vector<ImageSink*>& sinks) {
  std::vector<PendingRename> renames;
  for (ImageSink* sink : sinks) {
    std::vector<PendingRename> more = sink->finish();
    renames.insert(renames.end(), more.begin(), more.end());
  }
  commit_all_or_nothing(renames);
  for (ImageSink* sink : sinks) sink->committed();
}

OutputOptions output_options(const SinkOptions& options) {
  OutputOptions layout_options;
  layout_options.mosaic_tiles = options.mosaic_tiles;
  layout_options.image_channels = options.image_channels;
  layout_options.image_size = options.image_size;
  layout_options.on_notice = options.on_notice;
  layout_options.grid_columns = options.grid_columns;
  layout_options.grid_padding = options.grid_padding;
  layout_options.shard_images = options.shard_images;
  layout_options.facts = options.facts;
  layout_options.png_level = options.png_level;
  layout_options.png_group_images = options.png_group_images;
  layout_options.png_layout = options.png_layout;
  return layout_options;
}

std::unique_ptr<ImageSink> make_sink(OutputFormat format, const std::string& prefix, int64_t total_images,
                                     const SinkOptions& options) {
  return std::make_unique<FormatSink>(OutputLayout(format, prefix, total_images, output_options(options)), options);
}

std::unique_ptr<ImageSink> make_text_sink(const std::string& path, int64_t total_images, const SinkOptions& options) {
  return make_sink(OutputFormat::Text, without_extension(path, "txt"), total_images, options);
}

std::unique_ptr<ImageSink> make_npy_sink(const std::string& path, int64_t total_images) {
  return make_sink(OutputFormat::Npy, without_extension(path, "npy"), total_images);
}

std::unique_ptr<ImageSink> make_bmp_mosaic_sink(const std::string& path, int64_t total_images) {
  OutputOptions never_split;
  never_split.mosaic_tiles = 0;
  SinkOptions options;
  return std::make_unique<FormatSink>(
      OutputLayout(OutputFormat::Bmp, without_extension(path, "bmp"), total_images, never_split), options);
}

std::unique_ptr<ImageSink> make_mosaic_sink(MosaicEncoding encoding, const std::string& prefix, int64_t total_images,
                                             const SinkOptions& options) {
  return make_sink(encoding == MosaicEncoding::Bmp ? OutputFormat::Bmp : OutputFormat::MosaicPng, prefix,
                   total_images, options);
}

std::unique_ptr<ImageSink> make_png_folder_sink(const std::string& folder, int64_t total_images,
                                                const SinkOptions& options) {
  return make_sink(OutputFormat::Png, folder, total_images, options);
}

}  // namespace facegen
