// memory_output.cpp: a FileWriter over strings, and the one pass of a layout's drivers through it
// (see memory_output.hpp). The whole job is one run: every image is written at once, so each file's
// records start after its header and nothing else needs ordering.
#include "formats/memory_output.hpp"

#include <cstring>
#include <stdexcept>

namespace facegen {
namespace {

// Each file a string, sized up front where the layout knows its size; records and encoded PNGs grow
// theirs before any thread writes (the place step), so concurrent writes never resize.
class MemoryWriter : public FileWriter {
 public:
  explicit MemoryWriter(const OutputLayout& layout) : files_(layout.file_count()), folder_(layout.file_count()) {
    for (size_t k = 0; k < files_.size(); ++k) {
      const OutputFile file = layout.file(k);
      files_[k] = file.header;
      if (file.size > 0) files_[k].resize(static_cast<size_t>(file.size), '\0');
    }
  }
  void write_at(size_t file, int64_t offset, const void* data, int64_t bytes) override {
    std::string& into = files_.at(file);
    const size_t end = static_cast<size_t>(offset + bytes);
    if (into.size() < end) into.resize(end, '\0');  // single-threaded growth only (see grow())
    std::memcpy(&into[static_cast<size_t>(offset)], data, static_cast<size_t>(bytes));
  }
  const std::string& temp_path(size_t) override { throw std::logic_error("a memory output has no paths"); }
  void write_in_folder(size_t file, const std::string&, const std::string&, const std::string& bytes) override {
    folder_.at(file).push_back(bytes);  // one thread: write_png_files goes in image order
  }
  void grow(size_t file, size_t bytes) { files_.at(file).resize(bytes, '\0'); }
  size_t size(size_t file) const { return files_.at(file).size(); }
  std::vector<std::string>& files() { return files_; }
  std::vector<std::string>& folder(size_t file) { return folder_.at(file); }

 private:
  std::vector<std::string> files_;
  std::vector<std::vector<std::string>> folder_;  // png: the folder's files in order
};

// txt and tar: every record made, then placed after each file's header (the file grown to hold them).
void write_records(const OutputLayout& layout, const float* images, MemoryWriter& out, int threads) {
  const int64_t total = layout.total_images();
  const std::pair<size_t, size_t> files = total > 0 ? layout.files_of(0, total) : std::pair<size_t, size_t>{0, 0};
  RecordRun blocks;
  auto place = [&](const std::vector<int64_t>& bytes) {
    std::vector<int64_t> start(bytes.size());
    for (size_t k = 0; k < bytes.size(); ++k) {
      start[k] = static_cast<int64_t>(out.size(files.first + k));
      out.grow(files.first + k, static_cast<size_t>(start[k] + bytes[k]));
    }
    return start;
  };
  write_record_run(layout, ImageRun::floats(images, layout.image_channels(), layout.image_size()), 0, total, files, threads, blocks, place,
                   out);
}

}  // namespace

std::vector<std::string> encode_in_memory(const OutputLayout& layout, const float* images, int threads) {
  MemoryWriter out(layout);
  const int64_t total = layout.total_images();
  if (layout.writes_records()) {
    write_records(layout, images, out, threads);
    return std::move(out.files());
  }
  if (layout.format() == OutputFormat::Png) {
    layout.write_run(images, 0, total, out);  // in image order, on this thread
    return std::move(out.folder(0));
  }
  layout.write_run_threaded(images, 0, total, out, threads);  // fixed sizes: disjoint writes
  if (layout.format() != OutputFormat::MosaicPng) return std::move(out.files());
  std::vector<std::string> pngs;
  for (size_t k = 0; k < layout.file_count(); k += 2) {
    const auto* rgb = reinterpret_cast<const unsigned char*>(out.files()[k].data());
    layout.encode_png_from(k, rgb, out, threads);
    pngs.push_back(std::move(out.files()[k + 1]));
  }
  return pngs;
}

}  // namespace facegen
