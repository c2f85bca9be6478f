// seed_list.hpp: the seeds of --seeds (0-49999, 0-99,500,1000-1009), one image per seed, in the order given.
//
// The text is kept as its ranges, never expanded: --seeds 0-999999999 costs one range, and seed_at(k)
// finds image k's seed by a binary search over the ranges' first images (O(log ranges)). Every seed is
// a uint64 (0 to 18446744073709551615); a seed may appear more than once and then gives the same image
// each time. What the latent of a seed is: seed_latent (latent_source.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace facegen {

// The most images one run takes from any source (--random N, --seeds): twice this still fits an
// int64, so image counts and offsets can be added without overflow.
constexpr int64_t kMaxImages = INT64_MAX / 2;

struct SeedRange {
  uint64_t first = 0;
  uint64_t last = 0;  // inclusive: the range 5-5 is the one seed 5
  bool operator==(const SeedRange& other) const { return first == other.first && last == other.last; }
};

class SeedList {
 public:
  // Parses `text`, comma-separated pieces each a seed S or a range FIRST-LAST (FIRST <= LAST).
  // Throws UserError in one sentence naming `flag`, the piece (by number and text) and what was expected.
  static SeedList parse(const std::string& text, const std::string& flag = "--seeds");

  int64_t count() const { return count_; }                     // images: every range's seeds, repeats counted
  uint64_t seed_at(int64_t image) const;                       // image in [0, count()); std::out_of_range else
  const std::vector<SeedRange>& ranges() const { return ranges_; }
  // A seed that the list holds more than once and two images it gives (first < second), where there
  // is one; found over the ranges sorted (O(ranges log ranges)), never by expanding them.
  struct Repeat {
    uint64_t seed = 0;
    int64_t first = 0, second = 0;
  };
  std::optional<Repeat> repeated_seed() const;
  // "seeds 0-49999"; "seeds 0-99,500,1000-1009 (111 images)" where the count is not the one range's;
  // a long list shows its first and last pieces and how many there are. Without `with_count`, for
  // text that states the count beside it (the summary's input line), no image count.
  std::string describe(bool with_count = true) const;

 private:
  std::vector<SeedRange> ranges_;
  std::vector<int64_t> starts_;  // starts_[r]: the image of ranges_[r].first
  int64_t count_ = 0;
};

// The seed of image k of a run, for whatever names images by their seed (an output format, a
// summary); empty optional where the run's latents do not come from seeds (a file, --random).
using ImageSeeds = std::function<std::optional<uint64_t>(int64_t image)>;

}  // namespace facegen
