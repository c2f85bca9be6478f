// test_latents_parallel.cpp: the fast number conversion against strtof, the token map, and the
// ranged reading of a latent text file (threads, ranks' slices) against one serial reader on random
// files with random white space and injected errors: the same values, bit for bit, or the same message.
//
// Every file is drawn from a seed printed on failure; the serial reader (read_all_latents) is the
// reference, the way files have always been read.
#include <doctest/doctest.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "common/model_shape.hpp"
#include "latents/latent_index.hpp"
#include "latents/latent_source.hpp"
#include "latents/latents.hpp"
#include "tests/test_support.hpp"

using namespace facegen;
using namespace facegen_test;

namespace {

// One token as a file might hold it: mostly ordinary decimals, sometimes odd but valid forms.
std::string random_token(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(-1, 1);
  char text[64];
  const double x = unit(rng) * std::pow(10.0, static_cast<int>(rng() % 9) - 4);
  switch (rng() % 12) {
    case 0: std::snprintf(text, sizeof text, "%.9g", x); break;
    case 1: std::snprintf(text, sizeof text, "%+.3e", x); break;
    case 2: std::snprintf(text, sizeof text, "%a", x); break;
    case 3: std::snprintf(text, sizeof text, "%.0f.", std::floor(x * 100)); break;
    case 4: std::snprintf(text, sizeof text, ".%u", static_cast<unsigned>(rng() % 100000)); break;
    case 5: std::snprintf(text, sizeof text, "%.25f", x); break;
    default: std::snprintf(text, sizeof text, "%.6f", x); break;
  }
  return text;
}

std::string random_space(std::mt19937_64& rng) {
  static const char* const kSpaces[] = {" ", " ", " ", "\n", "\t", "\r\n", "  \t", "\v", "\f", "\n\n", " \r\n "};
  return kSpaces[rng() % (sizeof kSpaces / sizeof kSpaces[0])];
}

// A latent file of n images, perhaps with one mistake; `what` says which (for failure messages).
std::string random_file(std::mt19937_64& rng, int64_t n, std::string* what) {
  std::vector<std::string> tokens;
  for (int64_t i = 0; i < n * kLatentDim; ++i) tokens.push_back(random_token(rng));
  static const char* const kBad[] = {"abc", "nan", "-inf", "1e999", "-1e39", "1.5.2", "0x", "+-1", "1e", "infinity", "\x80"};
  const int64_t where = static_cast<int64_t>(rng() % static_cast<uint64_t>(tokens.size()));
  std::string header = std::to_string(n);
  switch (rng() % 8) {
    case 0: *what = "a bad token"; tokens[static_cast<size_t>(where)] = kBad[rng() % (sizeof kBad / sizeof kBad[0])]; break;
    case 1: *what = "too few numbers"; tokens.resize(static_cast<size_t>(where)); break;
    case 2: *what = "a token after the last number"; tokens.push_back(rng() % 2 ? "7" : "x"); break;
    case 3: *what = "two bad tokens"; tokens[static_cast<size_t>(where)] = "oops"; tokens[static_cast<size_t>(where / 2)] = "nan"; break;
    default: *what = "a valid file"; break;
  }
  if (rng() % 5 == 0) header = "\xEF\xBB\xBF" + header;
  std::string text = (rng() % 4 == 0 ? " \n" : "") + header + "\n";
  for (const std::string& token : tokens) text += token + random_space(rng);
  if (rng() % 3 == 0 && !text.empty()) text.pop_back();
  return text;
}

struct Outcome {
  std::vector<float> values;  // (N, 100)
  std::string error;
};

bool same(const Outcome& a, const Outcome& b) {
  return a.error == b.error && a.values.size() == b.values.size() &&
         (a.values.empty() || std::memcmp(a.values.data(), b.values.data(), a.values.size() * sizeof(float)) == 0);
}

Outcome serial(const std::string& path) {
  Outcome out;
  try {
    out.values = read_all_latents(path);
  } catch (const UserError& e) {
    out.error = e.what();
  }
  return out;
}

// The file as `ranks` ranks read it: the map counted in `ranks` parts and summed; rounds of at most
// `per_round` images per rank; in each round the slices in rank order, each with `threads` threads;
// the first error in file order stops the reading, as the lowest failing rank speaks for the job.
Outcome ranged(const std::string& path, int ranks, int threads, int64_t per_round) {
  Outcome out;
  try {
    std::vector<std::unique_ptr<LatentSource>> sources;
    for (int r = 0; r < ranks; ++r) sources.push_back(open_latent_file(path));
    std::vector<int64_t> sum(static_cast<size_t>(LatentIndex::kBlocks) * LatentIndex::kFields, 0);
    for (int r = 0; r < ranks; ++r) {
      sources[static_cast<size_t>(r)]->set_threads(threads);
      const std::vector<int64_t> part = sources[static_cast<size_t>(r)]->map_part(r, ranks);
      REQUIRE(part.size() == sum.size());
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
    }
    for (auto& source : sources) source->set_map(sum);
    const int64_t n = sources[0]->count();
    out.values.resize(static_cast<size_t>(n) * kLatentDim);
    const int64_t round = per_round * ranks;
    for (int64_t begin = 0; begin < n; begin += round) {
      const int64_t size = std::min(round, n - begin);
      for (int r = 0; r < ranks; ++r) {
        const int64_t from = begin + size * r / ranks, to = begin + size * (r + 1) / ranks;
        sources[static_cast<size_t>(r)]->read_range(from, to - from, out.values.data() + from * kLatentDim);
      }
    }
    sources[0]->finish();
  } catch (const UserError& e) {
    out.values.clear();
    out.error = e.what();
  }
  return out;
}

// One process: read() in chunks of `chunk` images with `threads` threads; the source maps itself.
Outcome chunked(const std::string& path, int threads, int64_t chunk) {
  Outcome out;
  try {
    std::unique_ptr<LatentSource> source = open_latent_file(path);
    source->set_threads(threads);
    std::vector<float> buffer(static_cast<size_t>(chunk) * kLatentDim);
    for (int64_t got; (got = source->read(buffer.data(), chunk)) > 0;) {
      out.values.insert(out.values.end(), buffer.begin(), buffer.begin() + got * kLatentDim);
    }
    source->finish();
  } catch (const UserError& e) {
    out.values.clear();
    out.error = e.what();
  }
  return out;
}

}  // namespace

TEST_CASE("latent values: the fast conversion accepts, refuses and rounds every token as strtof does") {
  std::mt19937_64 rng(20261123);
  std::vector<std::string> tokens = {"0", "-0", "+0", ".5", "5.", "+.5", "-.5", ".", "+", "-", "e5", "1e", "1e+",
                                     "1e-", "1E5", "1e+5", "0x1p3", "0X1.8P-2", "0x", "0x.p1", "inf", "-INF",
                                     "Infinity", "infinit", "nan", "NaN", "nan(123)", "-nan", "1e39", "-3.5e38",
                                     "3.4028235e38", "3.4028236e38", "1e-38", "1e-45", "1.4e-45", "7e-46", "1e-50",
                                     "1e-400", "00012.5000", "1,5", "1_000", "١", "0.1f", "2d", "1e0x", "--1",
                                     "340282346638528859811704183484516925440", "1.17549435e-38", "1.1754942e-38",
                                     std::string(300, '9'), "0." + std::string(80, '0') + "1", "1e2147483648",
                                     "1e-2147483649", "0e999999"};
  for (int i = 0; i < 200000; ++i) {
    char text[96];
    const uint32_t bits = static_cast<uint32_t>(rng());
    float f;
    std::memcpy(&f, &bits, sizeof f);
    const double d = std::ldexp(static_cast<double>(rng() >> 11), static_cast<int>(rng() % 300) - 200);
    switch (i % 6) {
      case 0: std::snprintf(text, sizeof text, "%.9g", static_cast<double>(f)); break;
      case 1: std::snprintf(text, sizeof text, "%.17g", d); break;  // between floats: tests rounding
      case 2: std::snprintf(text, sizeof text, "%a", static_cast<double>(f)); break;
      case 3: std::snprintf(text, sizeof text, "%.*e", static_cast<int>(rng() % 30), d); break;
      case 4: std::snprintf(text, sizeof text, "%+.8f", static_cast<double>(f)); break;
      default: std::snprintf(text, sizeof text, "%u.%ue%d", static_cast<unsigned>(rng() % 1000),
                             static_cast<unsigned>(rng()), static_cast<int>(rng() % 100) - 60); break;
    }
    tokens.push_back(text);
  }
  int mismatches = 0;
  for (const std::string& token : tokens) {
    char* end = nullptr;
    errno = 0;
    const float expected = std::strtof(token.c_str(), &end);
    const bool overflow = errno == ERANGE;
    LatentToken kind_expected = LatentToken::kValue;
    if (end != token.c_str() + token.size()) kind_expected = LatentToken::kNotNumber;
    else if (std::isnan(expected)) kind_expected = LatentToken::kNaN;
    else if (std::isinf(expected)) kind_expected = overflow ? LatentToken::kOverflow : LatentToken::kInfinite;
    float got = -1;
    const LatentToken kind = parse_latent_value(token.data(), token.size(), &got);
    const bool same_value = kind != LatentToken::kValue || std::memcmp(&got, &expected, sizeof got) == 0;
    if ((kind != kind_expected || !same_value) && ++mismatches <= 5) {
      FAIL_CHECK("token \"" << token << "\": kind " << static_cast<int>(kind) << " value " << got << ", strtof: kind "
                            << static_cast<int>(kind_expected) << " value " << expected);
    }
  }
  CHECK(mismatches == 0);
}

TEST_CASE("latent token map: every token's offset, line and column, whatever the parts") {
  TempDir dir;
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    std::string text;
    const int tokens = static_cast<int>(rng() % 400);
    for (int i = 0; i < tokens; ++i) text += random_space(rng) + (rng() % 50 ? random_token(rng) : std::string(5000, 'x'));
    if (rng() % 2) text += random_space(rng);
    const std::string path = dir.file("map.txt");
    write_file(path, text);
    const int parts = 1 + static_cast<int>(rng() % 6);
    const auto file = std::make_shared<const InputFile>(path, InputKind::Latents);
    std::vector<int64_t> sum(static_cast<size_t>(LatentIndex::kBlocks) * LatentIndex::kFields, 0);
    for (int p = 0; p < parts; ++p) {
      const std::vector<int64_t> part = LatentIndex::count_part(*file, p, parts, 1 + p % 3);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
    }
    const LatentIndex index(file, sum);
    CHECK(index.tokens() == tokens);
    // The reference: one walk through the text.
    int64_t token = 0, line = 1, column = 1;
    bool space_before = true;
    for (size_t i = 0; i <= text.size(); ++i) {
      const bool end = i == text.size();
      if (end || (!is_latent_space(text[i]) && space_before)) {
        const TextPosition at = index.locate(token);
        if (at.offset != static_cast<int64_t>(i) || at.line != line || at.column != column) {
          FAIL("trial " << trial << " token " << token << ": map says " << at.offset << " " << at.line << ":"
                        << at.column << ", the text " << i << " " << line << ":" << column);
        }
        ++token;
      }
      if (end) break;
      space_before = is_latent_space(text[i]);
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    CHECK(index.locate(token + 5).offset == static_cast<int64_t>(text.size()));
  }
}

TEST_CASE("latent text read by ranges: the same values or the same message as one serial reader") {
  TempDir dir;
  const uint64_t seed = 20261123;
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 60; ++trial) {
    std::string what;
    const int64_t n = 1 + static_cast<int64_t>(rng() % (trial % 3 == 0 ? 3 : 40));
    const std::string path = dir.file("f" + std::to_string(trial) + ".txt");
    write_file(path, random_file(rng, n, &what));
    const Outcome reference = serial(path);
    const int threads = 1 + trial % 8;
    const int ranks = std::vector<int>{1, 2, 3, 5}[static_cast<size_t>(trial % 4)];
    const int64_t per_round = 1 + static_cast<int64_t>(rng() % 7);
    const Outcome by_ranks = ranged(path, ranks, threads, per_round);
    const Outcome by_chunks = chunked(path, threads, per_round);
    INFO("seed " << seed << " trial " << trial << " (" << what << ", N = " << n << ", " << ranks << " ranks, "
                 << threads << " threads, " << per_round << " images per round)");
    INFO("serial reader: " << (reference.error.empty() ? "accepted" : reference.error));
    INFO("by ranges: " << (by_ranks.error.empty() ? "accepted" : by_ranks.error));
    INFO("in chunks: " << (by_chunks.error.empty() ? "accepted" : by_chunks.error));
    CHECK(same(reference, by_ranks));
    CHECK(same(reference, by_chunks));
  }
}

TEST_CASE("latent text read by ranges: a token longer than the read buffer, N too large, an empty file") {
  TempDir dir;
  const std::string path = dir.file("odd.txt");
  std::string text = "2\n";
  for (int i = 0; i < 150; ++i) text += "1.5 ";
  text += std::string(LatentReader::kDefaultBufferBytes + 10, '7') + " ";
  for (int i = 0; i < 49; ++i) text += "2.5\n";
  const std::vector<std::string> files = {text, "3\n1 2 3", "", "  \n\t", "0\n", "x 1 2", "1e3\n"};
  for (const std::string& content : files) {
    write_file(path, content);
    const Outcome reference = serial(path);
    CHECK(!reference.error.empty());
    for (int threads : {1, 3, 8}) {
      CHECK(same(reference, ranged(path, 3, threads, 1)));
      CHECK(same(reference, chunked(path, threads, 1)));
    }
  }
}
