// record_run.cpp: variable-length records in numbered files, the one mechanism behind txt (one file,
// a line per image) and tar (a file per shard, a sample per image); see output_format.hpp.
//
// A run is cut into one contiguous piece of images per thread; each thread makes its piece's records
// into a block of its own and notes each record's length. The lengths summed per file are what the
// driver places (a running end per file, or an exclusive scan over MPI ranks); then each piece is
// written with one call per file it reaches, again in parallel, so a run that spans several shards
// writes several files at once. A run whose records an encoder made (formats/encoded_run.hpp) is one
// piece, written from the encoder's buffer as it lies.
#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/threads.hpp"
#include "formats/output_format.hpp"

namespace facegen {

void RecordRun::make(const OutputLayout& layout, const ImageRun& images, int64_t first, int64_t count,
                     std::pair<size_t, size_t> files, int threads) {
  layout_ = &layout;
  first_ = first;
  count_ = count;
  files_ = files;
  encoded_ = nullptr;
  if (images.encoded) {  // one piece: the encoder's records, as they lie
    const int64_t* at = images.encoded->record_at + images.encoded_from;
    encoded_ = images.encoded->bytes + at[0];
    pieces_ = 1;
    record_bytes_.resize(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) record_bytes_[static_cast<size_t>(i)] = at[i + 1] - at[i];
  } else {
    make_records(layout, images, first, count, threads);
  }
  // Where each record starts among the run's records of its file.
  file_bytes_.assign(files.second - files.first, 0);
  record_at_.assign(static_cast<size_t>(count), 0);
  bytes_ = 0;
  for (int64_t i = 0; i < count; ++i) {
    const size_t f = layout.file_of_image(first + i);
    if (f < files.first || f >= files.second) throw std::logic_error("RecordRun: a record outside its files");
    record_at_[static_cast<size_t>(i)] = file_bytes_[f - files.first];
    file_bytes_[f - files.first] += record_bytes_[static_cast<size_t>(i)];
    bytes_ += record_bytes_[static_cast<size_t>(i)];
  }
}

// The records of a run made here, a piece of images per thread, each into a block of its own.
void RecordRun::make_records(const OutputLayout& layout, const ImageRun& images, int64_t first, int64_t count,
                             int threads) {
  pieces_ = std::max<int64_t>(1, std::min<int64_t>(resolve_threads(threads), count));
  if (static_cast<int64_t>(blocks_.size()) < pieces_) blocks_.resize(static_cast<size_t>(pieces_));
  record_bytes_.assign(static_cast<size_t>(count), 0);
  parallel_for(count > 0 ? pieces_ : 0, threads, [&](int64_t first_piece, int64_t end_piece) {
    for (int64_t b = first_piece; b < end_piece; ++b) {
      std::vector<char>& block = blocks_[static_cast<size_t>(b)];
      size_t used = 0;
      for (int64_t i = count * b / pieces_; i < count * (b + 1) / pieces_; ++i) {
        const size_t end = layout.append_record(images, i, first + i, block, used);
        record_bytes_[static_cast<size_t>(i)] = static_cast<int64_t>(end - used);
        used = end;
      }
    }
  });
}

void RecordRun::write(const std::vector<int64_t>& start, FileWriter& out, int threads) const {
  parallel_for(bytes_ > 0 ? pieces_ : 0, threads, [&](int64_t first_piece, int64_t end_piece) {
    for (int64_t b = first_piece; b < end_piece; ++b) {
      const char* data = encoded_ ? reinterpret_cast<const char*>(encoded_) : blocks_[static_cast<size_t>(b)].data();
      // The piece's images, a group per file: their records are contiguous in the block and in the file.
      for (int64_t i = count_ * b / pieces_, end = count_ * (b + 1) / pieces_; i < end;) {
        const size_t f = layout_->file_of_image(first_ + i);
        int64_t group_end = i, group_bytes = 0;
        while (group_end < end && layout_->file_of_image(first_ + group_end) == f) {
          group_bytes += record_bytes_[static_cast<size_t>(group_end++)];
        }
        if (group_bytes > 0) {
          out.write_at(f, start[f - files_.first] + record_at_[static_cast<size_t>(i)], data, group_bytes);
        }
        out.images_written(f, group_end - i);
        data += group_bytes;
        i = group_end;
      }
    }
  });
}

int64_t write_record_run(const OutputLayout& layout, const ImageRun& images, int64_t first, int64_t count,
                         std::pair<size_t, size_t> files, int threads, RecordRun& run, const RecordPlace& place,
                         FileWriter& out) {
  run.make(layout, images, first, count, files, threads);
  run.write(place(run.file_bytes()), out, threads);
  return run.bytes();
}

std::vector<int64_t> RecordEnds::place(std::pair<size_t, size_t> files, const std::vector<int64_t>& before,
                                       const std::vector<int64_t>& run) {
  // Runs come in order: a file before this run's first is complete.
  ends_.erase(std::remove_if(ends_.begin(), ends_.end(), [&](const auto& end) { return end.first < files.first; }),
              ends_.end());
  std::vector<int64_t> start(files.second - files.first);
  for (size_t f = files.first; f < files.second; ++f) {
    auto found = std::find_if(ends_.begin(), ends_.end(), [&](const auto& end) { return end.first == f; });
    if (found == ends_.end()) {
      ends_.emplace_back(f, static_cast<int64_t>(layout_.file(f).header.size()));
      found = ends_.end() - 1;
    }
    start[f - files.first] = found->second + before[f - files.first];
    found->second += run[f - files.first];
  }
  return start;
}

int64_t write_text_run(const float* images, int64_t count, int threads, RecordRun& run,
                       const std::function<int64_t(int64_t)>& place, FileWriter& out, int channels, int size) {
  OutputOptions options;
  options.image_channels = channels;
  options.image_size = size;
  // The lines alone: the layout's N only sizes its header, which this run does not write.
  const OutputLayout text(OutputFormat::Text, "text", count, options);
  return write_record_run(text, ImageRun::floats(images, channels, size), 0, count, {0, 1}, threads, run,
                          [&](const std::vector<int64_t>& bytes) { return std::vector<int64_t>{place(bytes[0])}; },
                          out);
}

}  // namespace facegen
