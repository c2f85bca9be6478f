// text_latents.cpp: latent text files read in order (streams) or by image ranges (regular files), all
// through the file's one descriptor.
#include "latents/text_latents.hpp"

#include <algorithm>
#include <exception>
#include <stdexcept>
#include <utility>
#include <vector>

#include "common/model_shape.hpp"
#include "common/threads.hpp"
#include "latents/latent_index.hpp"
#include "latents/latents.hpp"

namespace facegen {
namespace {

// A stream: one reader, in order.
class StreamedTextLatents : public LatentSource {
 public:
  StreamedTextLatents(std::shared_ptr<const InputFile> file, int latent_dim)
      : reader_(file, latent_dim), path_(file->path()) {}
  int64_t count() const override { return reader_.count(); }
  int64_t read(float* dst, int64_t max_images) override {
    const int64_t images = reader_.read(dst, max_images);
    stop_for_test("latents-read");
    return images;
  }
  void finish() override { reader_.finish(); }
  std::string describe() const override { return path_; }

 private:
  LatentReader reader_;
  std::string path_;
};

// A regular file: N from the header, then any range of images through the token map.
class IndexedTextLatents : public RangeLatentSource {
 public:
  IndexedTextLatents(std::shared_ptr<const InputFile> file, int latent_dim)
      : file_(std::move(file)), latent_dim_(latent_dim), count_(LatentReader(file_, latent_dim).count()) {}
  int64_t count() const override { return count_; }
  std::string describe() const override { return file_->path(); }
  int64_t file_bytes() const override { return file_->bytes(); }
  const InputFile* input_file() const override { return file_.get(); }

  std::vector<int64_t> map_part(int part, int parts) override {
    return LatentIndex::count_part(*file_, part, parts, threads());
  }
  void set_map(std::vector<int64_t> sum) override { index_ = std::make_unique<LatentIndex>(file_, std::move(sum)); }

  void read_range(int64_t first, int64_t images, float* dst) override {
    check_range(first, images);
    if (images == 0) return;
    map_if_needed();
    // Pieces in file order; each stops at its own first error, and the first piece's error wins.
    const int64_t pieces = std::min<int64_t>(threads(), images);
    std::vector<std::exception_ptr> errors(static_cast<size_t>(pieces));
    parallel_for(pieces, static_cast<int>(pieces), [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        const int64_t from = images * p / pieces, to = images * (p + 1) / pieces;
        try {
          LatentReader reader = resume_at(first + from);
          reader.read(dst + from * latent_dim_, to - from);
        } catch (...) {
          errors[static_cast<size_t>(p)] = std::current_exception();
        }
      }
    });
    for (const std::exception_ptr& error : errors)
      if (error) std::rethrow_exception(error);
    stop_for_test("latents-read");
  }

  void finish() override {
    map_if_needed();
    resume_at(count_).finish();
  }

 private:
  void map_if_needed() {
    if (!index_) set_map(map_part(0, 1));
  }
  // A reader at the first number of `image` (image == N: where the numbers should end).
  LatentReader resume_at(int64_t image) const {
    const TextPosition at = index_->locate(1 + image * latent_dim_);
    return LatentReader(file_, at.offset, LatentResume{count_, image, at.line, at.column, latent_dim_});
  }

  std::shared_ptr<const InputFile> file_;
  int latent_dim_;  // nz
  int64_t count_;
  std::unique_ptr<LatentIndex> index_;
};

}  // namespace

std::unique_ptr<LatentSource> open_text_latents(std::shared_ptr<const InputFile> file, int latent_dim) {
  if (file->regular()) return std::make_unique<IndexedTextLatents>(std::move(file), latent_dim);
  return std::make_unique<StreamedTextLatents>(std::move(file), latent_dim);
}

std::unique_ptr<LatentSource> open_text_latents(const std::string& path, int latent_dim) {
  return open_text_latents(std::make_shared<const InputFile>(path, InputKind::Latents), latent_dim);
}

}  // namespace facegen
