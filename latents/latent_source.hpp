// latent_source.hpp: where latent vectors come from: a file, seeded random draws, one latent per seed, or
// interpolations.
//
// Every source hands out its N latents in order, (count, nz) floats per read (nz: the model's latent
// size, given when the source is opened; 100 for the SHPC network). Most can also read any
// range of images on their own (random_access): a regular text or .npy file, and the drawn latents;
// several threads, and every MPI rank, then read their own share. A pipe is read in order only. Random latents are
// counter-based: value v of image n is a pure function of (seed, n, v), so the same seed gives the
// same images whatever the batch size, the chunking or the number of ranks, and a rank can start at
// any image without drawing the ones before it. The latent of a seed (--seeds) is image 0 of that seed's
// sequence (seed_latent), so it depends on the seed alone, wherever it stands in the list. The drawn
// values themselves, and --truncation, are defined in common/latent_draw.hpp; a backend that draws
// them itself (the CUDA backend) is given their recipe instead (drawn(), recipe()).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/latent_draw.hpp"
#include "common/model_shape.hpp"
#include "latents/input_file.hpp"
#include "latents/seed_list.hpp"

namespace facegen {

class LatentSource {
 public:
  virtual ~LatentSource() = default;
  virtual int64_t count() const = 0;                            // N
  virtual int64_t read(float* dst, int64_t max_images) = 0;     // next min(max, left) latents
  virtual void finish() = 0;  // after all N: checks nothing follows, and that a file did not change
  virtual std::string describe() const = 0;                     // for messages and the summary

  // Whether read_range works: any images, in any order, by any process that opened the same source.
  virtual bool random_access() const { return false; }
  // Images [first, first + count) into dst, (count, nz), using up to threads() threads. It does not
  // move read()'s position. Throws UserError, and std::logic_error where !random_access().
  virtual void read_range(int64_t first, int64_t count, float* dst);
  // The size of the file behind the source at its open (-1: none).
  virtual int64_t file_bytes() const { return -1; }
  // The regular file behind a random-access source, opened once (null: none), so that processes can
  // check they read one file.
  virtual const InputFile* input_file() const { return nullptr; }

  // Whether the latents are drawn, each value a pure function of (seed, image, value) that a backend
  // can make itself (Backend::draws_latents): --random and --seeds. recipe(first, count, seeds) then
  // describes images [first, first + count) (read_range's numbering) as read_range would make them,
  // filling seeds (room for count) where each image has a seed of its own, which the recipe points
  // to. recipe() throws std::logic_error where !drawn().
  virtual bool drawn() const { return false; }
  virtual LatentRecipe recipe(int64_t first, int64_t count, uint64_t* seeds) const;

  // A text file first maps where its tokens start (latent_index.hpp). One process maps it on its
  // first read; processes that share the work each count part `part` of `parts` (map_part: integers,
  // zero outside the part; empty when the source needs no map) and all install the element-wise sum
  // (set_map).
  virtual std::vector<int64_t> map_part(int /*part*/, int /*parts*/) { return {}; }
  virtual void set_map(std::vector<int64_t> /*sum*/) {}

  // Threads used to read and map (default: every CPU available_cpus() finds).
  void set_threads(int threads) { threads_ = threads; }
  int threads() const;

 private:
  int threads_ = 0;
};

// A source that reads any range of images: read() walks read_range from image 0, and read_range
// checks its range with check_range (the .npy and text files, the interpolations).
class RangeLatentSource : public LatentSource {
 public:
  int64_t read(float* dst, int64_t max_images) final;
  bool random_access() const final { return true; }

 protected:
  // Throws std::invalid_argument (a bug, not a user's mistake) unless [first, first + images) lies
  // within [0, count()).
  void check_range(int64_t first, int64_t images) const;

 private:
  int64_t next_ = 0;  // read()'s position
};

// A latent file, told apart by its content: a NumPy .npy file (it starts with "\x93NUMPY", see
// npy_latents.hpp), else text: N, then N*nz numbers (latents.hpp). A regular file is read with random
// access; a pipe or other stream only in order, as text. A file named *.npy must be a .npy file.
// The path is opened once (input_file.hpp): the first bytes are looked at and every later read goes
// through that descriptor, so the run reads the file it opened even if the path is deleted or another
// file is renamed over it; a change in place is reported, by finish() at the latest.
std::unique_ptr<LatentSource> open_latent_file(const std::string& path, int latent_dim = kLatentDim);

// N images of N(0, 1) latents, images [first, first + count) of the sequence keyed by seed; value v
// of an image does not depend on nz, so models of different nz share their first values. truncation:
// T > 0 draws each value within [-T, T] (latent_draw.hpp); 0: none. The same for the sources below.
std::unique_ptr<LatentSource> make_random_latents(int64_t count, uint64_t seed, int64_t first = 0,
                                                  int latent_dim = kLatentDim, double truncation = 0);

// A side x side grid (N = side * side): row r walks in `side` steps along the great circle from
// random latent 2r to random latent 2r + 1 of the seed (spherical interpolation, which keeps the
// norm typical of a Gaussian latent), so each row of the mosaic is one interpolation. The endpoints
// are the double values of the draws (drawn_latent_value), made once for each row a read touches.
std::unique_ptr<LatentSource> make_interpolation_latents(int64_t side, uint64_t seed, int latent_dim = kLatentDim,
                                                         double truncation = 0);

// One latent per seed of the list, image k the latent of seeds->seed_at(k) (seed_latent): the same
// image for a seed whatever the batch size, chunking, rank count or the seed's place in the list.
std::unique_ptr<LatentSource> make_seed_latents(std::shared_ptr<const SeedList> seeds, int latent_dim = kLatentDim,
                                               double truncation = 0);

// What the command line asked for: a file, --random N, or --interpolate SIDE (with --seed), or
// --seeds LIST.
struct LatentSpec {
  std::string path;
  int64_t random_count = 0;
  int64_t interpolate_side = 0;
  uint64_t seed = 1;
  std::shared_ptr<const SeedList> seeds;  // --seeds; shared, so that outputs can name each image's seed
  int latent_dim = kLatentDim;  // nz: values per latent, the model's (the drivers set it from the model file)
  double truncation = 0;        // --truncation T (> 0, finite): drawn values within [-T, T]; 0: none

  // The seed of image k (0 <= k < N; std::out_of_range else) where the latents come from --seeds;
  // empty for every other source (image n of --random N --seed S is not the image of any one seed).
  // The function holds the list, so it outlives the spec.
  ImageSeeds image_seeds() const;
};
std::unique_ptr<LatentSource> open_latents(const LatentSpec& spec);

// The latent of `seed` (nz values into out): image 0 of --random with --seed `seed`, i.e. value v is
// random_latent_value(seed, 0, v) (common/latent_draw.hpp), drawn_latent_value's with a truncation
// T > 0. The one definition that --seeds, and anything else that makes an image from a seed, uses:
// --seeds 7 and --random 1 --seed 7 give the same image.
void seed_latent(uint64_t seed, int latent_dim, float* out, double truncation = 0);

}  // namespace facegen
