// test_seed_list.cpp: --seeds text -> ranges (every valid shape, every bad one with its sentence), image k's
// seed against an expanded reference, and the latents of a seed list: each the latent of its seed alone
// (image 0 of --random 1 with that --seed), the same however the list is read.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "latents/latent_source.hpp"
#include "latents/seed_list.hpp"
#include "tests/test_support.hpp"

using namespace facegen;
using namespace facegen_test;

namespace {

// The list written out seed by seed: the reference seed_at's binary search is checked against.
std::vector<uint64_t> expanded(const std::vector<SeedRange>& ranges) {
  std::vector<uint64_t> seeds;
  for (const SeedRange& range : ranges)
    for (uint64_t s = range.first;; ++s) {
      seeds.push_back(s);
      if (s == range.last) break;
    }
  return seeds;
}

std::string range_text(const SeedRange& range) {
  return range.first == range.last ? std::to_string(range.first)
                                   : std::to_string(range.first) + "-" + std::to_string(range.last);
}

// Every latent of the source by read(), `chunk` images at a time; poisoned, so each must be written.
std::vector<float> read_all(LatentSource& source, int64_t chunk, int nz = kLatentDim) {
  std::vector<float> all(static_cast<size_t>(source.count() * nz), NAN);
  int64_t done = 0;
  while (done < source.count()) {
    const int64_t got = source.read(all.data() + done * nz, chunk);
    REQUIRE(got > 0);
    done += got;
  }
  CHECK(source.read(all.data(), chunk) == 0);
  source.finish();
  for (float v : all) REQUIRE(std::isfinite(v));
  return all;
}

std::shared_ptr<const SeedList> seeds_of(const std::string& text) {
  return std::make_shared<const SeedList>(SeedList::parse(text));
}

}  // namespace

TEST_CASE("--seeds text: a seed, a range, a list of both, repeats, the ends of uint64") {
  struct Case {
    std::string text;
    std::vector<SeedRange> ranges;
    int64_t count;
    std::string description;
  };
  const uint64_t top = UINT64_MAX;
  const std::vector<Case> cases = {
      {"7", {{7, 7}}, 1, "seeds 7"},
      {"0", {{0, 0}}, 1, "seeds 0"},
      {"0-49999", {{0, 49999}}, 50000, "seeds 0-49999"},
      {"5-5", {{5, 5}}, 1, "seeds 5"},
      {"007-0010", {{7, 10}}, 4, "seeds 7-10"},
      {"0-99,500,1000-1009", {{0, 99}, {500, 500}, {1000, 1009}}, 111, "seeds 0-99,500,1000-1009 (111 images)"},
      {"3,3", {{3, 3}, {3, 3}}, 2, "seeds 3,3 (2 images)"},
      {"9-11,0-2", {{9, 11}, {0, 2}}, 6, "seeds 9-11,0-2 (6 images)"},
      {"18446744073709551615", {{top, top}}, 1, "seeds 18446744073709551615"},
      {"18446744073709551613-18446744073709551615", {{top - 2, top}}, 3,
       "seeds 18446744073709551613-18446744073709551615"},
      {"1,2,3,4,5,6,7,8", {{1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}, {6, 6}, {7, 7}, {8, 8}}, 8,
       "seeds 1,2,3,4,5,6,7,8 (8 images)"},
      {"1,2,3,4,5,6,7,8,9-10",
       {{1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}, {6, 6}, {7, 7}, {8, 8}, {9, 10}},
       10,
       "seeds 1,2,3,4,5,6,...,9-10 (9 pieces, 10 images)"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.text);
    const SeedList list = SeedList::parse(c.text);
    CHECK(list.ranges() == c.ranges);
    CHECK(list.count() == c.count);
    CHECK(list.describe() == c.description);
    // Without the count (text that states it beside), and in a latent source's description.
    const size_t count_from = c.description.find(" images)");
    if (c.ranges.size() <= 8 && count_from != std::string::npos) {
      CHECK(list.describe(false) == c.description.substr(0, c.description.rfind(" (")));
    } else if (count_from != std::string::npos) {
      CHECK(list.describe(false) == c.description.substr(0, c.description.rfind(", ")) + ")");
    } else {
      CHECK(list.describe(false) == c.description);
    }
    CHECK(make_seed_latents(seeds_of(c.text))->describe() == "N(0, 1) latents of " + list.describe(false));
    const std::vector<uint64_t> seeds = expanded(c.ranges);
    for (int64_t k = 0; k < list.count(); ++k) REQUIRE(list.seed_at(k) == seeds[static_cast<size_t>(k)]);
    CHECK_THROWS_AS(list.seed_at(list.count()), std::out_of_range);
    CHECK_THROWS_AS(list.seed_at(-1), std::out_of_range);
  }
}

TEST_CASE("--seeds text that is not a seed list: one sentence naming the flag, the piece and what was expected") {
  const std::string bounds = "(expected seeds from 0 to 18446744073709551615)";
  const std::string not_seed = "is not a seed S or a range FIRST-LAST of whole numbers";
  const std::string empty_piece = "is empty (expected a seed S or a range FIRST-LAST between the commas)";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "--seeds expects seeds such as 0-49999 or 0-99,500,1000-1009, got an empty value"},
      {"abc", "--seeds piece 1, 'abc', " + not_seed},
      {"0-99,5x", "--seeds piece 2, '5x', " + not_seed},
      {"1.5", "--seeds piece 1, '1.5', " + not_seed},
      {"+5", "--seeds piece 1, '+5', " + not_seed},
      {" 5", "--seeds piece 1, ' 5', " + not_seed},
      {"3-", "--seeds piece 1, '3-', " + not_seed},
      {"-", "--seeds piece 1, '-', " + not_seed},
      {"1-2-3", "--seeds piece 1, '1-2-3', " + not_seed},
      {"0x10", "--seeds piece 1, '0x10', " + not_seed},
      {"5-3", "--seeds piece 1, '5-3', is a descending range (expected FIRST-LAST with FIRST <= LAST)"},
      {"1,9-0", "--seeds piece 2, '9-0', is a descending range (expected FIRST-LAST with FIRST <= LAST)"},
      {"-5", "--seeds piece 1, '-5', holds a negative number " + bounds},
      {"5--3", "--seeds piece 1, '5--3', holds a negative number " + bounds},
      {"-5-3", "--seeds piece 1, '-5-3', holds a negative number " + bounds},
      {"18446744073709551616", "--seeds piece 1, '18446744073709551616', holds a number out of range " + bounds},
      {"1,2,0-99999999999999999999", "--seeds piece 3, '0-99999999999999999999', holds a number out of range " + bounds},
      {"1,,2", "--seeds piece 2 " + empty_piece},
      {",1", "--seeds piece 1 " + empty_piece},
      {"1,", "--seeds piece 2 " + empty_piece},
      {"0-18446744073709551615",
       "--seeds asks for more images than a run can hold (at most 4611686018427387903), reached at piece 1, "
       "'0-18446744073709551615'"},
      {"1,0-4611686018427387902",
       "--seeds asks for more images than a run can hold (at most 4611686018427387903), reached at piece 2, "
       "'0-4611686018427387902'"},
      {"12345678901234567890123456789012345678901234567890",
       "--seeds piece 1, '1234567890123456789012345678901234567...', holds a number out of range " + bounds},
  };
  for (const auto& c : cases) {
    CAPTURE(c.first);
    CHECK(user_error_of([&] { SeedList::parse(c.first); }) == c.second);
  }
  CHECK(user_error_of([] { SeedList::parse("x", "--other"); }) ==
        "--other piece 1, 'x', is not a seed S or a range FIRST-LAST of whole numbers");
}

TEST_CASE("seed_at over random ranges of odd sizes equals the list written out") {
  std::mt19937_64 rng(20261125);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<SeedRange> ranges;
    std::string text;
    const int pieces = 1 + static_cast<int>(rng() % 9);
    for (int p = 0; p < pieces; ++p) {
      const uint64_t sizes[] = {1, 3, 127, 2, 64};
      const uint64_t size = sizes[rng() % 5];
      // Near either end of uint64 as well as in the middle.
      const uint64_t starts[] = {rng() % 1000, UINT64_MAX - size + 1 - rng() % 5, rng() >> 1};
      const uint64_t first = starts[rng() % 3];
      ranges.push_back({first, first + size - 1});
      text += (p ? "," : "") + range_text(ranges.back());
    }
    CAPTURE(text);
    const SeedList list = SeedList::parse(text);
    REQUIRE(list.ranges() == ranges);
    const std::vector<uint64_t> seeds = expanded(ranges);
    REQUIRE(list.count() == static_cast<int64_t>(seeds.size()));
    for (int64_t k = 0; k < list.count(); ++k) REQUIRE(list.seed_at(k) == seeds[static_cast<size_t>(k)]);
  }
}

TEST_CASE("repeated_seed: a seed the list gives twice and two of its images, as the list written out shows") {
  std::mt19937_64 rng(20261128);
  int repeats = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::string text;
    const int pieces = 1 + static_cast<int>(rng() % 6);
    for (int p = 0; p < pieces; ++p) {
      const uint64_t sizes[] = {1, 3, 17, 2};
      const uint64_t size = sizes[rng() % 4];
      // Small seeds overlap often; seeds near 2^64 - 1 test the ends.
      const uint64_t first = rng() % 3 ? rng() % 60 : UINT64_MAX - size + 1 - rng() % 3;
      text += (p ? "," : "") + range_text({first, first + size - 1});
    }
    CAPTURE(text);
    const SeedList list = SeedList::parse(text);
    const std::vector<uint64_t> seeds = expanded(list.ranges());
    std::vector<uint64_t> sorted = seeds;
    std::sort(sorted.begin(), sorted.end());
    const bool has_repeat = std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end();
    const std::optional<SeedList::Repeat> repeat = list.repeated_seed();
    REQUIRE(repeat.has_value() == has_repeat);
    if (!repeat) continue;
    ++repeats;
    CHECK(repeat->first < repeat->second);
    CHECK(seeds.at(static_cast<size_t>(repeat->first)) == repeat->seed);
    CHECK(seeds.at(static_cast<size_t>(repeat->second)) == repeat->seed);
  }
  CHECK(repeats > 50);  // the trials reach both answers
  CHECK(!SeedList::parse("0-9,10,11-99,18446744073709551615").repeated_seed());
  const auto repeat = SeedList::parse("0-7,42,5").repeated_seed();
  REQUIRE(repeat);
  CHECK((repeat->seed == 5 && repeat->first == 5 && repeat->second == 9));
}

TEST_CASE("a range of the most images a run holds stays one range, read at any image") {
  // Writing this out would take 2^62 entries: that the test runs at all says it is never expanded.
  const SeedList most = SeedList::parse("0-4611686018427387902");
  CHECK(most.count() == kMaxImages);
  CHECK(most.ranges().size() == 1);
  CHECK(most.seed_at(kMaxImages - 1) == 4611686018427387902ull);
  const SeedList billion = SeedList::parse("5,0-999999999,7");
  CHECK(billion.count() == 1000000002);
  CHECK(billion.seed_at(1000000000) == 999999999);
  CHECK(billion.seed_at(1000000001) == 7);
  CHECK(billion.describe() == "seeds 5,0-999999999,7 (1000000002 images)");
  // A latent source over it reads any slice without drawing the images before it.
  auto source = make_seed_latents(seeds_of("0-4611686018427387902"));
  CHECK(source->count() == kMaxImages);
  std::vector<float> last(kLatentDim, NAN);
  source->read_range(kMaxImages - 1, 1, last.data());
  std::vector<float> expected(kLatentDim, NAN);
  seed_latent(4611686018427387902ull, kLatentDim, expected.data());
  CHECK(last == expected);
}

TEST_CASE("the latent of seed s is image 0 of --random 1 --seed s, wherever s stands in the list") {
  const std::vector<uint64_t> seeds = {0, 1, 7, 3, 123456789, UINT64_MAX, UINT64_MAX - 1, 7};
  std::string text;
  for (size_t k = 0; k < seeds.size(); ++k) text += (k ? "," : "") + std::to_string(seeds[k]);
  for (int nz : {1, 3, kLatentDim, 128}) {
    CAPTURE(nz);
    LatentSpec spec;
    spec.seeds = seeds_of(text);
    spec.latent_dim = nz;
    auto source = open_latents(spec);
    CHECK(source->random_access());
    const std::vector<float> got = read_all(*source, 3, nz);
    for (size_t k = 0; k < seeds.size(); ++k) {
      CAPTURE(seeds[k]);
      auto random = make_random_latents(1, seeds[k], 0, nz);
      const std::vector<float> one = read_all(*random, 1, nz);
      REQUIRE(std::equal(one.begin(), one.end(), got.begin() + static_cast<int64_t>(k) * nz));
    }
  }
  // The two 7s are one image; other seeds are other images.
  auto source = make_seed_latents(seeds_of("7,8,7"));
  const std::vector<float> three = read_all(*source, 3);
  CHECK(std::equal(three.begin(), three.begin() + kLatentDim, three.begin() + 2 * kLatentDim));
  CHECK(!std::equal(three.begin(), three.begin() + kLatentDim, three.begin() + kLatentDim));
}

TEST_CASE("a seed list's latents: the same by any chunking, thread count or range read in any order") {
  std::mt19937_64 rng(77);
  auto list = seeds_of("0-126,500,18446744073709551613-18446744073709551615,40-42,3,3,1000-1062");
  auto whole = make_seed_latents(list);
  const std::vector<float> expected = read_all(*whole, whole->count());
  const int64_t n = whole->count();
  CHECK(n == 127 + 1 + 3 + 3 + 2 + 63);
  for (int64_t chunk : {1, 3, 16, 127}) {
    auto source = make_seed_latents(list);
    source->set_threads(static_cast<int>(1 + chunk % 4));
    CHECK(read_all(*source, chunk) == expected);
  }
  auto ranged = make_seed_latents(list);
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t first = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
    const int64_t count = static_cast<int64_t>(rng() % static_cast<uint64_t>(n - first + 1));
    CAPTURE(first);
    CAPTURE(count);
    ranged->set_threads(static_cast<int>(1 + rng() % 4));
    std::vector<float> part(static_cast<size_t>(count * kLatentDim) + 1, NAN);
    ranged->read_range(first, count, part.data());
    REQUIRE(std::isnan(part.back()));
    part.pop_back();
    REQUIRE(std::equal(part.begin(), part.end(), expected.begin() + first * kLatentDim));
  }
  std::vector<float> two(2 * kLatentDim);
  CHECK_THROWS_AS(ranged->read_range(n - 1, 2, two.data()), std::invalid_argument);
}

TEST_CASE("image_seeds: the seed of image k for --seeds, none for the other sources") {
  LatentSpec spec;
  spec.seeds = seeds_of("10-12,99");
  const ImageSeeds seed_of = spec.image_seeds();
  CHECK(seed_of(0) == std::optional<uint64_t>(10));
  CHECK(seed_of(2) == std::optional<uint64_t>(12));
  CHECK(seed_of(3) == std::optional<uint64_t>(99));
  // The function keeps the list alive after the spec is gone.
  LatentSpec copy = spec;
  spec.seeds.reset();
  const ImageSeeds kept = copy.image_seeds();
  copy.seeds.reset();
  CHECK(kept(3) == std::optional<uint64_t>(99));
  LatentSpec random;
  random.random_count = 4;
  random.seed = 10;
  CHECK(!random.image_seeds()(0).has_value());
}
