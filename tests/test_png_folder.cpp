// test_png_folder.cpp: a folder of PNGs on the file system: the paths of both layouts
// (formats/png_folder_layout.hpp), what the guard takes for facegen's own folder and what an old
// folder loses (commit/existing_outputs.hpp), and OutputFiles' files in subfolders from many threads,
// moved into place in groups (engine/output_files.hpp, engine/folder_files.hpp).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "commit/existing_outputs.hpp"
#include "common/errors.hpp"
#include "common/temp_registry.hpp"
#include "engine/folder_files.hpp"
#include "engine/output_files.hpp"
#include "formats/output_format.hpp"
#include "formats/png_folder_layout.hpp"
#include "tests/test_support.hpp"

using namespace facegen;
using namespace facegen_test;

namespace {

std::string why_folder(const TempDir& dir, const std::string& name) {
  const int fd = ::open(dir.path.c_str(), O_RDONLY | O_DIRECTORY);
  REQUIRE(fd >= 0);
  const std::string reason = why_not_replaceable(fd, name, WrittenKind::PngFolder);
  ::close(fd);
  return reason;
}

// The files below `folder`, as paths inside it, sorted.
std::set<std::string> files_below(const std::string& folder) {
  std::set<std::string> out;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(folder)) {
    if (entry.is_regular_file()) out.insert(entry.path().lexically_relative(folder).string());
  }
  return out;
}

OutputFile folder_spec(const std::string& path, int64_t total, PngLayout layout) {
  return {OutputFile::Kind::Folder, path, "", -1, 0, total, {}, OutputFormat::Png,
          png_longest_relative_path(total, layout, SampleFacts())};
}

// A PNG's first bytes (what the guard looks for), then bytes of the file's own.
std::string file_bytes(int64_t index) {
  return std::string("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16) + std::to_string(index * 7919) + std::string(index % 5, 'x');
}

}  // namespace

TEST_CASE("png folder layout: a subfolder's name is its files' names less three digits, a thousand files each") {
  std::mt19937_64 rng(42);
  std::vector<int64_t> totals = {1, 2, 999, 1000, 1001, 3500, 999999, 1000000, 1000001, 10000000, 10000001};
  for (int k = 0; k < 20; ++k) totals.push_back(1 + static_cast<int64_t>(rng() % 40000000));
  for (int64_t total : totals) {
    CAPTURE(total);
    std::vector<int64_t> indices = {0, total - 1, total / 2, std::min<int64_t>(total - 1, 999),
                                    std::min<int64_t>(total - 1, 1000)};
    for (int k = 0; k < 50; ++k) indices.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(total)));
    for (int64_t i : indices) {
      CAPTURE(i);
      const std::string file = png_file_name(i, total, SampleFacts());
      CHECK(png_relative_path(i, total, PngLayout::Flat, SampleFacts()) == file);
      CHECK(png_subfolder_name(i, total, PngLayout::Flat).empty());
      const std::string sub = png_subfolder_name(i, total, PngLayout::Subfolders);
      CHECK(png_relative_path(i, total, PngLayout::Subfolders, SampleFacts()) == sub + "/" + file);
      CHECK(sub == file.substr(0, file.size() - 4 - 3));
      CHECK(std::stoll(sub) == i / kPngSubfolderImages);
      CHECK(is_png_subfolder_name(sub));
      CHECK(is_png_file_name(file));
      // Every path of one total is as long as every other (the temporary folder leaves room for it).
      CHECK(png_relative_path(i, total, PngLayout::Subfolders, SampleFacts()).size() ==
            png_relative_path(0, total, PngLayout::Subfolders, SampleFacts()).size());
      for (PngLayout layout : {PngLayout::Flat, PngLayout::Subfolders}) {
        CHECK(png_relative_path(i, total, layout, SampleFacts()).size() == png_longest_relative_path(total, layout, SampleFacts()));
      }
    }
  }
  // Counted one by one: 3,500 images fill 000, 001, 002 with a thousand and 003 with 500.
  std::map<std::string, int> per_subfolder;
  for (int64_t i = 0; i < 3500; ++i) per_subfolder[png_subfolder_name(i, 3500, PngLayout::Subfolders)]++;
  CHECK(per_subfolder == std::map<std::string, int>{{"000", 1000}, {"001", 1000}, {"002", 1000}, {"003", 500}});
  CHECK(png_subfolder_images(PngLayout::Subfolders, 3500) == 1000);
  CHECK(png_subfolder_images(PngLayout::Flat, 3500) == 3500);
}

TEST_CASE("png folder layout: images named by seed lie in their index's subfolder, within the longest path") {
  std::mt19937_64 rng(7);
  for (int64_t total : {int64_t{1}, int64_t{999}, int64_t{1001}, int64_t{1000001}, int64_t{12345678}}) {
    CAPTURE(total);
    // Any seeds, the largest among them: a seed's name does not depend on the total.
    std::vector<uint64_t> seeds = {0, 7, 12345, std::numeric_limits<uint64_t>::max()};
    for (int k = 0; k < 20; ++k) seeds.push_back(rng() >> (rng() % 64));
    SampleFacts facts;
    facts.named_by_seed = true;
    facts.image_seed = [&seeds](int64_t index) { return seeds[static_cast<size_t>(index) % seeds.size()]; };
    for (int64_t i : {int64_t{0}, total / 2, total - 1, static_cast<int64_t>(rng() % static_cast<uint64_t>(total))}) {
      CAPTURE(i);
      const std::string file = seed_image_key(facts.image_seed(i)) + ".png";
      CHECK(png_file_name(i, total, facts) == file);
      CHECK(is_png_file_name(file));
      CHECK(png_relative_path(i, total, PngLayout::Flat, facts) == file);
      const std::string sub = png_subfolder_name(i, total, PngLayout::Subfolders);
      CHECK(sub == png_file_name(i, total, SampleFacts()).substr(0, sub.size()));  // the index's, not the seed's
      CHECK(png_relative_path(i, total, PngLayout::Subfolders, facts) == sub + "/" + file);
      for (PngLayout layout : {PngLayout::Flat, PngLayout::Subfolders}) {
        CHECK(png_relative_path(i, total, layout, facts).size() <= png_longest_relative_path(total, layout, facts));
      }
    }
    // The longest is reached: the largest seed's name.
    for (PngLayout layout : {PngLayout::Flat, PngLayout::Subfolders}) {
      CHECK(png_relative_path(3, std::max<int64_t>(total, 4), layout, facts).size() ==
            png_longest_relative_path(std::max<int64_t>(total, 4), layout, facts));
    }
  }
}

TEST_CASE("png folder layout: the names of the flag and of subfolders") {
  CHECK(parse_png_layout("flat", "--png-layout") == PngLayout::Flat);
  CHECK(parse_png_layout("subfolders", "--png-layout") == PngLayout::Subfolders);
  for (const char* bad : {"", "Flat", "sub", "subfolder", "imagenet"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(parse_png_layout(bad, "--png-layout"),
                         ("--png-layout expects flat or subfolders, got '" + std::string(bad) + "'").c_str(), UserError);
  }
  for (const char* name : {"000", "999", "1234", "00000000000000000"}) CHECK(is_png_subfolder_name(name));
  for (const char* name : {"", "0", "12", "00a", "000 ", "-00", "000.png", "0001/"}) {
    CAPTURE(name);
    CHECK(!is_png_subfolder_name(name));
  }
}

TEST_CASE("existing outputs: a PNG folder of either layout is facegen's; anything else at any level is not") {
  TempDir dir;
  namespace fs = std::filesystem;
  auto make = [&](const std::string& name, const std::vector<std::string>& files) {
    fs::create_directories(dir.file(name));
    for (const std::string& f : files) {
      fs::create_directories(fs::path(dir.file(name + "/" + f)).parent_path());
      write_file(dir.file(name + "/" + f), std::string("png"));
    }
  };
  make("sub", {"000/000000.png", "000/000999.png", "001/001000.png"});
  make("flat", {"000000.png", "000001.png"});
  make("both", {"000/000000.png", "000001.png"});
  make("emptysub", {});
  fs::create_directory(dir.file("emptysub/000"));
  for (const char* name : {"sub", "flat", "both", "emptysub"}) {
    CAPTURE(name);
    CHECK(why_folder(dir, name).empty());
  }
  make("notes", {"000/000000.png", "000/notes.txt"});
  CHECK(why_folder(dir, "notes") == "holds 000/notes.txt, which facegen does not write there");
  make("deep", {"000/001/001000.png"});
  CHECK(why_folder(dir, "deep") == "holds 000/001, which facegen does not write there");
  make("short", {"12/012000.png"});
  CHECK(why_folder(dir, "short") == "holds 12, which facegen does not write there");
  make("filesub", {});
  write_file(dir.file("filesub/000"), std::string("x"));
  CHECK(why_folder(dir, "filesub") == "holds 000, which facegen does not write there");
  make("linksub", {});
  fs::create_directory_symlink(dir.file("sub/000"), dir.file("linksub/000"));
  CHECK(why_folder(dir, "linksub") == "holds 000, which facegen does not write there");
  make("linkpng", {"000/000000.png"});
  fs::create_symlink(dir.file("flat/000000.png"), dir.file("linkpng/000/000001.png"));
  make("many", {"000/a", "000/b", "c"});
  CHECK(why_folder(dir, "linkpng") == "holds 000/000001.png, which facegen does not write there");
  CHECK(why_folder(dir, "many").find(" and 2 more entries, which facegen does not write there") != std::string::npos);

  const int fd = ::open(dir.path.c_str(), O_RDONLY | O_DIRECTORY);
  REQUIRE(fd >= 0);
  CHECK(why_not_png_subfolder(fd, "sub").empty() == false);  // not a subfolder's name
  // The old folder loses its PNGs and its emptied subfolders, and nothing else.
  CHECK(remove_old_png_folder(fd, "sub").empty());
  CHECK(!fs::exists(dir.file("sub")));
  CHECK(remove_old_png_folder(fd, "both").empty());
  CHECK(!fs::exists(dir.file("both")));
  CHECK(remove_old_png_folder(fd, "notes") == "it holds 000/notes.txt, which facegen did not write");
  CHECK(files_below(dir.file("notes")) == std::set<std::string>{"000/notes.txt"});
  CHECK(!remove_old_png_folder(fd, "linksub").empty());
  CHECK(fs::exists(dir.file("sub")) == false);
  CHECK(fs::is_symlink(dir.file("linksub/000")));
  CHECK(!remove_old_png_folder(fd, "linkpng").empty());
  CHECK(fs::is_symlink(dir.file("linkpng/000/000001.png")));
  CHECK(read_file(dir.file("flat/000000.png")) == "png");  // a link's target is never touched
  ::close(fd);
}

TEST_CASE("OutputFiles: a folder's files in subfolders from many threads, each byte in place, and nothing left") {
  TempDir dir;
  const int64_t total = 4321;
  for (PngLayout layout : {PngLayout::Flat, PngLayout::Subfolders}) {
    CAPTURE(png_layout_name(layout));
    const std::string final_path = dir.file(std::string("r-") + png_layout_name(layout));
    const OutputFile spec = folder_spec(final_path, total, layout);
    std::vector<PendingRename> renames;
    {
      OutputFiles files(FileList{1, [&](size_t) { return spec; }});
      const std::string temp = files.create(0);
      std::vector<std::thread> threads;
      for (int t = 0; t < 7; ++t) {
        threads.emplace_back([&, t] {
          for (int64_t i = t; i < total; i += 7) {  // every thread in every subfolder
            TempCreation creating;
            const std::string bytes = file_bytes(i);
            files.write_in_folder(0, png_relative_path(i, total, layout, SampleFacts()), "shown", bytes);
            files.add_bytes(0, static_cast<int64_t>(bytes.size()));
          }
        });
      }
      for (auto& t : threads) t.join();
      files.finish();
      renames = files.renames();
      REQUIRE(renames.size() == 1);
      CHECK(renames[0].temp == temp);
      int64_t bytes = 0;
      for (int64_t i = 0; i < total; ++i) bytes += static_cast<int64_t>(file_bytes(i).size());
      CHECK(files.bytes_written() == bytes);
      const std::set<std::string> made = files_below(temp);
      CHECK(made.size() == static_cast<size_t>(total));
      for (int64_t i = 0; i < total; i += 97) CHECK(read_file(temp + "/" + png_relative_path(i, total, layout, SampleFacts())) == file_bytes(i));
      CHECK(read_file(temp + "/" + png_relative_path(total - 1, total, layout, SampleFacts())) == file_bytes(total - 1));
    }  // not committed: removed
    CHECK(dir.names().empty());
  }
}

TEST_CASE("OutputFiles: --resume's groups go into the final folder's subfolders, made where missing") {
  TempDir dir;
  const int64_t total = 2500;
  const std::string final_path = dir.file("r");
  const OutputFile spec = folder_spec(final_path, total, PngLayout::Subfolders);
  // An earlier run's group of subfolder 001 is there; the group of 001 is made again over it.
  std::filesystem::create_directories(final_path + "/001");
  write_file(final_path + "/001/001000.png", file_bytes(7));
  {
    OutputFiles files(FileList{1, [&](size_t) { return spec; }});
    files.place_when_complete([](size_t) {});
    const std::string temp = files.create(0);
    for (int64_t group : {1, 0, 2}) {
      std::vector<std::string> names;
      for (int64_t i = group * 1000; i < std::min(total, group * 1000 + 1000); ++i) {
        names.push_back(png_relative_path(i, total, PngLayout::Subfolders, SampleFacts()));
        files.write_in_folder(0, names.back(), names.back(), file_bytes(i));
      }
      files.place_in_folder(0, names);
      CHECK(!std::filesystem::exists(temp + "/" + png_subfolder_name(group * 1000, total, PngLayout::Subfolders)));
    }
    files.finish();  // the temporary folder, emptied, goes
    CHECK(!std::filesystem::exists(temp));
  }
  CHECK(dir.names() == std::vector<std::string>{"r"});
  CHECK(files_below(final_path).size() == static_cast<size_t>(total));
  for (int64_t i = 0; i < total; i += 123) CHECK(read_file(final_path + "/" + png_relative_path(i, total, PngLayout::Subfolders, SampleFacts())) == file_bytes(i));
  CHECK(read_file(final_path + "/001/001000.png") == file_bytes(1000));
  // A file where a subfolder goes is never replaced: the group fails in one sentence.
  std::filesystem::remove_all(final_path);
  std::filesystem::create_directories(final_path);
  write_file(final_path + "/000", std::string("mine"));
  {
    OutputFiles files(FileList{1, [&](size_t) { return spec; }});
    files.place_when_complete([](size_t) {});
    files.create(0);
    files.write_in_folder(0, "000/000000.png", "shown", file_bytes(0));
    CHECK_THROWS_WITH_AS(files.place_in_folder(0, {"000/000000.png"}),
                         ("cannot write the PNG subfolder " + final_path +
                          "/000: it is a file, where a subfolder of PNGs goes; facegen replaces only what it wrote")
                             .c_str(),
                         UserError);
  }
  CHECK(read_file(final_path + "/000") == "mine");
  CHECK(dir.names() == std::vector<std::string>{"r"});
}

TEST_CASE("temp registry: a TempCreation inside another costs no signal mask change and ends with the outer one") {
  auto blocked = [] {
    sigset_t now;
    ::pthread_sigmask(SIG_BLOCK, nullptr, &now);
    return ::sigismember(&now, SIGTERM) == 1;
  };
  REQUIRE(!blocked());
  {
    TempCreation outer;
    CHECK(blocked());
    {
      TempCreation inner;
      CHECK(blocked());
    }
    CHECK(blocked());  // the inner one's end leaves the outer one's signals held
  }
  CHECK(!blocked());
}
