// test_latents.cpp: the latent-file reader: every kind of white space, tokens cut by the 1 MiB read
// buffer, chunked reads, and one test per user mistake that checks the message names what and where.
//
// Expected values come from strtof on the tokens the test itself wrote.
#include <doctest/doctest.h>

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/errors.hpp"
#include "latents/latents.hpp"
#include "generator/network.hpp"
#include "tests/test_support.hpp"

using namespace facegen;
using namespace facegen_test;

namespace {

// "N\n" and then `values` in the file, tokens given as text. Values separated by " ".
std::string latent_text(int64_t n, const std::vector<std::string>& values) {
  std::string text = std::to_string(n) + "\n";
  for (const std::string& v : values) text += v + " ";
  return text;
}

std::vector<std::string> simple_values(int64_t count) {
  std::vector<std::string> values;
  for (int64_t i = 0; i < count; ++i) values.push_back(std::to_string(i % 7 - 3) + ".5");
  return values;
}

// Message of the UserError from reading the whole file.
std::string read_error(const std::string& path) {
  return user_error_of([&] { read_all_latents(path); });
}

}  // namespace

TEST_CASE("latents: white space of every kind separates values") {
  TempDir dir;
  const std::string path = dir.file("in.txt");
  std::string text = "  2\r\n";
  std::vector<float> expected;
  for (int i = 0; i < 200; ++i) {
    const std::string token = std::to_string(i * 0.01 - 1.0) + (i % 3 == 0 ? "e-1" : "");
    expected.push_back(std::strtof(token.c_str(), nullptr));
    const char* separators[] = {" ", "\t", "\n", "\r\n", "  \t ", "\r\n\r\n"};
    text += token + separators[i % 6];
  }
  text.pop_back();  // the file may end without white space after the last value
  write_file(path, text);

  const std::vector<float> got = read_all_latents(path);
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i] == expected[i]);
  }
}

TEST_CASE("latents: a big file streams through the buffer, in chunks, with tokens cut by refills") {
  TempDir dir;
  const std::string path = dir.file("big.txt");
  const int64_t n = 6000;  // 600,000 values, about 6 MB: several refills of the 1 MiB buffer
  std::string text = std::to_string(n) + "\n";
  std::vector<float> expected;
  uint64_t state = 12345;
  for (int64_t i = 0; i < n * kLatentDim; ++i) {
    // The first refill happens at byte 1,048,576: put a long token right across it.
    if (text.size() < 1048576 && text.size() > 1048576 - 20) {
      text.append(1048576 - 7 - text.size(), ' ');
      const std::string token = "-1.2500000000";
      text += token + " ";
      expected.push_back(std::strtof(token.c_str(), nullptr));
      continue;
    }
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const int kind = static_cast<int>(state >> 60);
    char token[64];
    const double v = static_cast<double>(static_cast<int64_t>(state >> 11) % 4000000 - 2000000) / 1e6;
    if (kind < 8) {
      std::snprintf(token, sizeof token, "%.6f", v);
    } else if (kind < 12) {
      std::snprintf(token, sizeof token, "%.9e", v);
    } else {
      std::snprintf(token, sizeof token, "%g", v);
    }
    expected.push_back(std::strtof(token, nullptr));
    text += token;
    text += (i % kLatentDim == kLatentDim - 1) ? ((i / kLatentDim) % 2 ? "\r\n" : "\n") : (kind == 3 ? "\t" : " ");
  }
  REQUIRE(text[1048575] != ' ');  // the token spans the first buffer boundary
  REQUIRE(text[1048576] != ' ');
  write_file(path, text);

  LatentReader reader(path);
  CHECK(reader.count() == n);
  std::vector<float> got(static_cast<size_t>(n) * kLatentDim);
  int64_t done = 0;
  const int64_t chunks[] = {1, 7, 500, 4000};
  for (int k = 0; done < n; ++k) {
    const int64_t read = reader.read(got.data() + done * kLatentDim, chunks[k % 4]);
    CHECK(read == std::min(chunks[k % 4], n - done));
    done += read;
    CHECK(reader.images_read() == done);
  }
  CHECK(reader.read(got.data(), 10) == 0);  // nothing left
  CHECK_NOTHROW(reader.finish());
  REQUIRE(expected.size() == got.size());
  size_t mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i) mismatches += got[i] != expected[i];
  CHECK(mismatches == 0);
}

TEST_CASE("latents: the committed inputs read cleanly") {
  const std::string names[] = {"inputs/input1.txt", "inputs/input2.txt", "inputs/input3.txt"};
  const int64_t counts[] = {10, 100, 1000};
  for (int i = 0; i < 3; ++i) {
    if (!std::filesystem::exists(names[i])) continue;  // run from another directory
    CAPTURE(names[i]);
    const std::vector<float> latents = read_all_latents(names[i]);
    CHECK(latents.size() == static_cast<size_t>(counts[i] * kLatentDim));
  }
}

TEST_CASE("latents: underflow to zero and hexadecimal floats are numbers") {
  TempDir dir;
  const std::string path = dir.file("in.txt");
  std::vector<std::string> values = simple_values(100);
  values[0] = "1e-999";
  values[1] = "0x1p-3";
  values[2] = "+2";
  write_file(path, latent_text(1, values));
  const std::vector<float> got = read_all_latents(path);
  CHECK(got[0] == 0.0f);
  CHECK(got[1] == 0.125f);
  CHECK(got[2] == 2.0f);
}

TEST_CASE("latents: a missing file, a directory, an empty file") {
  TempDir dir;
  const std::string missing = dir.file("nope.txt");
  std::string message = read_error(missing);
  CHECK(contains(message, missing));
  CHECK(contains(message, "No such file or directory"));

  message = read_error(dir.path);
  CHECK(contains(message, "is a directory"));

  const std::string empty = dir.file("empty.txt");
  write_file(empty, "");
  message = read_error(empty);
  CHECK(contains(message, empty + ":1:1:"));
  CHECK(contains(message, "empty"));

  write_file(empty, " \n\t\r\n ");
  message = read_error(empty);
  CHECK(contains(message, empty + ":3:2:"));
  CHECK(contains(message, "empty"));
}

TEST_CASE("latents: N must be a positive integer") {
  TempDir dir;
  const std::string path = dir.file("in.txt");
  for (const char* bad : {"2.5", "abc", "1e3", "0x10", "10abc"}) {
    CAPTURE(bad);
    write_file(path, std::string(bad) + "\n1 2 3\n");
    const std::string message = read_error(path);
    CHECK(contains(message, path + ":1:1:"));
    CHECK(contains(message, "\"" + std::string(bad) + "\""));
    CHECK(contains(message, "positive integer"));
  }
  write_file(path, "2.5\n");
  CHECK(contains(read_error(path), "non-integer"));

  for (const char* bad : {"0", "-3", "-99999999999999999999999"}) {
    CAPTURE(bad);
    write_file(path, "\n  " + std::string(bad) + "\n1 2 3\n");
    const std::string message = read_error(path);
    CHECK(contains(message, path + ":2:3:"));
    CHECK(contains(message, "positive"));
    CHECK(contains(message, bad));
  }
}

TEST_CASE("latents: N larger than the file can hold is caught right after N") {
  TempDir dir;
  const std::string path = dir.file("in.txt");
  write_file(path, "1000000\n1 2 3\n");  // 14 bytes
  std::string message = user_error_of([&] { LatentReader reader(path); });
  CHECK(contains(message, path + ":1:1:"));
  CHECK(contains(message, "1,000,000"));
  CHECK(contains(message, "100,000,000 numbers"));
  CHECK(contains(message, "200,000,007 bytes"));  // 7 bytes of N, then 2 per number
  CHECK(contains(message, "only 14 bytes"));

  write_file(path, "99999999999999999999999\n1 2\n");
  message = user_error_of([&] { LatentReader reader(path); });
  CHECK(contains(message, "too large"));

  write_file(path, "9223372036854775807\n1 2\n");
  message = user_error_of([&] { LatentReader reader(path); });
  CHECK(contains(message, "too large"));

  // The bound is tight, never wrong: N = 1 with 100 one-character values needs 2 + 200 - 1 bytes.
  std::string text = "1";
  for (int i = 0; i < 100; ++i) text += " 1";
  write_file(path, text);
  CHECK(read_all_latents(path).size() == 100);
}

TEST_CASE("latents: a token that is not a number is quoted with its image, value and position") {
  TempDir dir;
  const std::string path = dir.file("in.txt");
  std::vector<std::string> values = simple_values(200);
  values[104] = "1.2.3";
  std::string text = "2\n";
  for (int i = 0; i < 200; ++i) text += values[i] + (i == 99 ? "\n" : " ");
  write_file(path, text);
  // Line 3 holds image 2; "1.2.3" is its 5th token.
  size_t column = 1;
  for (int i = 100; i < 104; ++i) column += values[i].size() + 1;
  std::string message = read_error(path);
  CHECK(contains(message, path + ":3:" + std::to_string(column) + ":"));
  CHECK(contains(message, "\"1.2.3\""));
  CHECK(contains(message, "image 2 of 2"));
  CHECK(contains(message, "value 5 of 100"));
  CHECK(contains(message, "not a number"));

  values = simple_values(100);
  values[0] = std::string(100, 'x');
  write_file(path, latent_text(1, values));
  message = read_error(path);
  CHECK(contains(message, "\"" + std::string(32, 'x') + "...\""));
  CHECK(!contains(message, std::string(33, 'x')));
  CHECK(contains(message, "image 1 of 1, value 1 of 100"));

  values[0] = "1,5";
  write_file(path, latent_text(1, values));
  CHECK(contains(read_error(path), "\"1,5\""));

  values[0] = std::string("\x01\xff", 2);
  write_file(path, latent_text(1, values));
  CHECK(contains(read_error(path), "\"\\x01\\xff\""));
}

TEST_CASE("latents: NaN, Inf and overflow are rejected") {
  TempDir dir;
  const std::string path = dir.file("in.txt");
  struct Case {
    const char* token;
    const char* says;
  };
  const Case cases[] = {{"nan", "NaN"},      {"NaN", "NaN"},          {"-nan", "NaN"},
                        {"inf", "infinite"}, {"-Infinity", "infinite"}, {"1e999", "too large"},
                        {"-1e39", "too large"}};
  for (const Case& c : cases) {
    CAPTURE(c.token);
    std::vector<std::string> values = simple_values(100);
    values[99] = c.token;
    write_file(path, latent_text(1, values));
    const std::string message = read_error(path);
    CHECK(contains(message, "\"" + std::string(c.token) + "\""));
    CHECK(contains(message, c.says));
    CHECK(contains(message, "value 100 of 100"));
    CHECK(contains(message, "finite"));
  }
}

TEST_CASE("latents: fewer numbers than N * 100") {
  TempDir dir;
  const std::string path = dir.file("in.txt");
  write_file(path, latent_text(3, simple_values(250)) + "\n");
  const std::string message = read_error(path);
  CHECK(contains(message, path + ":3:1:"));
  CHECK(contains(message, "ends after 250 numbers"));
  CHECK(contains(message, "N = 3"));
  CHECK(contains(message, "300"));

  // A chunked read sees the shortage in the chunk that runs into it, not before.
  LatentReader reader(path);
  std::vector<float> dst(300);
  CHECK(reader.read(dst.data(), 2) == 2);
  CHECK_THROWS_AS(reader.read(dst.data(), 1), UserError);
}

TEST_CASE("latents: more numbers than N * 100 are caught by finish()") {
  TempDir dir;
  const std::string path = dir.file("in.txt");
  write_file(path, "1\n" + latent_text(1, simple_values(100)).substr(2) + "\n  7 8\n");
  LatentReader reader(path);
  std::vector<float> dst(100);
  CHECK(reader.read(dst.data(), 5) == 1);
  const std::string message = user_error_of([&] { reader.finish(); });
  CHECK(contains(message, path + ":3:3:"));
  CHECK(contains(message, "\"7\""));
  CHECK(contains(message, "100 numbers"));
  CHECK(contains(message, "N = 1"));
}

TEST_CASE("latents: finish() before every image was read is a bug of the caller") {
  TempDir dir;
  const std::string path = dir.file("in.txt");
  write_file(path, latent_text(2, simple_values(200)));
  LatentReader reader(path);
  std::vector<float> dst(100);
  reader.read(dst.data(), 1);
  CHECK_THROWS_AS(reader.finish(), std::logic_error);
}

TEST_CASE("latents: a stream reads like a file, with any read buffer from 1 byte up") {
  // Tokens of every length up to 12 characters, mixed white space, a UTF-8 byte order mark.
  std::string text = "\xEF\xBB\xBF" "2\r\n";
  std::vector<float> expected;
  for (int i = 0; i < 2 * kLatentDim; ++i) {
    const std::string token = std::to_string((i * 37) % 1000 - 500) + (i % 3 ? ".25e-1" : "");
    text += token + (i % 5 == 0 ? "\n" : i % 7 == 0 ? "\t " : " ");
    expected.push_back(std::strtof(token.c_str(), nullptr));
  }
  for (size_t buffer : {size_t{1}, size_t{2}, size_t{3}, size_t{7}, size_t{13}, size_t{64},
                        LatentReader::kDefaultBufferBytes}) {
    CAPTURE(buffer);
    std::FILE* stream = ::fmemopen(text.data(), text.size(), "rb");
    REQUIRE(stream != nullptr);
    std::vector<float> got(2 * kLatentDim);
    try {
      LatentReader reader(stream, "memory", buffer);
      REQUIRE(reader.count() == 2);
      const int64_t first = reader.read(got.data(), 1);  // outside CHECK: a throw must reach the catch
      const int64_t second = reader.read(got.data() + kLatentDim, 5);
      reader.finish();
      CHECK(first == 1);
      CHECK(second == 1);
      CHECK(got == expected);
    } catch (const UserError& e) {
      // Only a buffer shorter than a token may refuse the file, and it says so.
      CHECK(buffer < 16);
      CHECK(contains(e.what(), "is longer than"));
    }
  }
}

TEST_CASE("latents: a stream's errors name the stream; the reader closes it when it throws") {
  std::string text = "3\n1 2 x";
  std::FILE* stream = ::fmemopen(text.data(), text.size(), "rb");
  REQUIRE(stream != nullptr);
  // fmemopen has no file size, so N = 3 passes the size check and the bad token is found by read().
  LatentReader reader(stream, "memory-input", 4);
  std::vector<float> got(3 * kLatentDim);
  const std::string message = user_error_of([&] { reader.read(got.data(), 3); });
  CHECK(contains(message, "memory-input:2:5"));
  CHECK(contains(message, "\"x\""));
  std::FILE* empty_stream = ::fmemopen(nullptr, 1, "w+");
  REQUIRE(empty_stream != nullptr);
  CHECK(contains(user_error_of([&] { LatentReader failing(empty_stream, "nothing"); }), "nothing:1:1"));
}
