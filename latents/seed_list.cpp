// seed_list.cpp: parsing --seeds into ranges, image k's seed by binary search, the summary's description.
#include "latents/seed_list.hpp"

#include <algorithm>
#include <stdexcept>

#include "common/errors.hpp"

namespace facegen {
namespace {

constexpr const char* kSeedBounds = "seeds from 0 to 18446744073709551615";

// One piece's text as a message quotes it: a long one is cut, so the sentence stays one line.
std::string quoted(const std::string& piece) {
  return "'" + (piece.size() <= 40 ? piece : piece.substr(0, 37) + "...") + "'";
}

// A number of a piece: digits only (no sign, no spaces), each seed within uint64.
enum class NumberKind { Seed, Negative, OutOfRange, NotNumber };

NumberKind parse_number(const std::string& text, uint64_t* value) {
  const bool negative = !text.empty() && text[0] == '-';
  const std::string digits = negative ? text.substr(1) : text;
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return NumberKind::NotNumber;
  if (negative) return NumberKind::Negative;
  uint64_t v = 0;
  for (char c : digits) {
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - digit) / 10) return NumberKind::OutOfRange;
    v = v * 10 + digit;
  }
  *value = v;
  return NumberKind::Seed;
}

// Piece `number` (1-based) of the flag's text: a seed S or a range FIRST-LAST.
SeedRange parse_piece(const std::string& piece, size_t number, const std::string& flag) {
  const std::string where = flag + " piece " + std::to_string(number);
  if (piece.empty()) {
    throw UserError(where + " is empty (expected a seed S or a range FIRST-LAST between the commas)");
  }
  // The dash of a range comes after the first character: a leading one is a minus sign.
  const size_t dash = piece.find('-', 1);
  const std::string texts[2] = {piece.substr(0, dash),
                                dash == std::string::npos ? piece : piece.substr(dash + 1)};
  uint64_t values[2] = {0, 0};
  for (int end = 0; end < 2; ++end) {
    switch (parse_number(texts[end], &values[end])) {
      case NumberKind::Seed:
        break;
      case NumberKind::Negative:
        throw UserError(where + ", " + quoted(piece) + ", holds a negative number (expected " + kSeedBounds + ")");
      case NumberKind::OutOfRange:
        throw UserError(where + ", " + quoted(piece) + ", holds a number out of range (expected " + kSeedBounds + ")");
      case NumberKind::NotNumber:
        throw UserError(where + ", " + quoted(piece) + ", is not a seed S or a range FIRST-LAST of whole numbers");
    }
  }
  if (values[0] > values[1]) {
    throw UserError(where + ", " + quoted(piece) + ", is a descending range (expected FIRST-LAST with FIRST <= LAST)");
  }
  return {values[0], values[1]};
}

// "5" or "0-99".
std::string range_text(const SeedRange& range) {
  return range.first == range.last ? std::to_string(range.first)
                                   : std::to_string(range.first) + "-" + std::to_string(range.last);
}

}  // namespace

SeedList SeedList::parse(const std::string& text, const std::string& flag) {
  if (text.empty()) {
    throw UserError(flag + " expects seeds such as 0-49999 or 0-99,500,1000-1009, got an empty value");
  }
  SeedList list;
  size_t start = 0, number = 1;
  for (;; ++number) {
    const size_t comma = text.find(',', start);
    const SeedRange range = parse_piece(text.substr(start, comma - start), number, flag);
    // Seeds in this range, counted without overflow: a range may hold all 2^64 seeds.
    const uint64_t seeds_minus_one = range.last - range.first;
    const uint64_t room = static_cast<uint64_t>(kMaxImages - list.count_);
    if (seeds_minus_one >= room) {
      throw UserError(flag + " asks for more images than a run can hold (at most " + std::to_string(kMaxImages) +
                      "), reached at piece " + std::to_string(number) + ", " + quoted(range_text(range)));
    }
    list.ranges_.push_back(range);
    list.starts_.push_back(list.count_);
    list.count_ += static_cast<int64_t>(seeds_minus_one) + 1;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return list;
}

std::optional<SeedList::Repeat> SeedList::repeated_seed() const {
  std::vector<size_t> order(ranges_.size());
  for (size_t r = 0; r < order.size(); ++r) order[r] = r;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ranges_[a].first < ranges_[b].first; });
  // Sorted by first seed, a range overlaps an earlier one exactly when it starts at or before the
  // farthest last seed so far; its first seed is then in both.
  size_t farthest = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t r = order[k];
    if (k > 0 && ranges_[r].first <= ranges_[farthest].last) {
      const uint64_t seed = ranges_[r].first;
      const int64_t in_farthest = starts_[farthest] + static_cast<int64_t>(seed - ranges_[farthest].first);
      const int64_t in_r = starts_[r];
      return Repeat{seed, std::min(in_farthest, in_r), std::max(in_farthest, in_r)};
    }
    if (k == 0 || ranges_[r].last > ranges_[farthest].last) farthest = r;
  }
  return std::nullopt;
}

uint64_t SeedList::seed_at(int64_t image) const {
  if (image < 0 || image >= count_) {
    throw std::out_of_range("seed_at: image " + std::to_string(image) + " of " + std::to_string(count_));
  }
  // The last range that starts at or before the image.
  const size_t r = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), image) - starts_.begin()) - 1;
  return ranges_[r].first + static_cast<uint64_t>(image - starts_[r]);
}

std::string SeedList::describe(bool with_count) const {
  // Up to 8 pieces in full; beyond that the first 6, "...", and the last.
  constexpr size_t kShown = 8;
  std::string text = "seeds ";
  for (size_t r = 0; r < ranges_.size(); ++r) {
    if (ranges_.size() > kShown && r == kShown - 2) {
      text += ",...";
      r = ranges_.size() - 1;
    }
    text += (r == 0 ? "" : ",") + range_text(ranges_[r]);
  }
  const std::string pieces = std::to_string(ranges_.size()) + " pieces";
  const std::string images = with_count ? std::to_string(count_) + " images" : "";
  if (ranges_.size() > kShown) return text + " (" + pieces + (with_count ? ", " + images : "") + ")";
  if (ranges_.size() > 1 && with_count) return text + " (" + images + ")";
  return text;
}

}  // namespace facegen
