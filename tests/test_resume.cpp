// test_resume.cpp: the parts of --resume, each alone: the manifest (written, appended, read back, cut
// short, damaged, another job's), the units a plan holds, which recorded units are kept (their files'
// bytes and digest against the records, written here from content_digest of the bytes concatenated),
// the temporaries of dead runs (only this job's, only by the names facegen gives), and the sinks
// putting files in place as each is finished. tests/suites/resume.sh runs whole jobs.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "commit/dead_temporaries.hpp"
#include "commit/resume_manifest.hpp"
#include "engine/image_sink.hpp"
#include "engine/piece_plan.hpp"
#include "engine/resume_files.hpp"
#include "tests/random_bytes.hpp"
#include "tests/test_support.hpp"

using namespace facegen;
using namespace facegen_test;

namespace {

JobDescription a_job(const std::string& seed = "3") {
  return {{"program", "facegen test"}, {"--seed", seed}, {"--formats", "tar"}, {"images", "23"}};
}

std::string random_string(size_t n, uint64_t seed) { return random_bytes<std::string>(n, seed); }

}  // namespace

TEST_CASE("resume manifest: the job and every appended unit read back; parts of other ranks too") {
  TempDir dir;
  const std::string prefix = dir.file("r");
  CHECK_FALSE(read_resume_manifest(prefix).has_value());
  start_resume_manifest(prefix, a_job());
  CHECK(read_file(prefix + ".facegen-resume").compare(0, 26, "facegen resume manifest 1\n") == 0);
  const ContentDigest d1 = content_digest("one", 3), d2 = content_digest("two", 3);
  {
    ManifestAppender main(prefix, 0);
    main.append({OutputFormat::Tar, 0, 1234, d1}, "r-000000.tar");
    ManifestAppender rank2(prefix, 2);
    rank2.append({OutputFormat::Png, 7, 99, d2}, "r/000700.png ... r/000799.png");
    rank2.append({OutputFormat::NpyU8, 1, 5, d1}, "r-000001.u8.npy");
  }
  const std::optional<ResumeManifest> read = read_resume_manifest(prefix);
  REQUIRE(read.has_value());
  CHECK(job_differences(read->job, a_job()).empty());
  REQUIRE(read->units.size() == 3);
  CHECK((read->units[0].format == OutputFormat::Tar && read->units[0].unit == 0 && read->units[0].bytes == 1234 &&
         read->units[0].digest == d1));
  CHECK((read->units[1].format == OutputFormat::Png && read->units[1].unit == 7 && read->units[1].digest == d2));
  CHECK((read->units[2].format == OutputFormat::NpyU8 && read->units[2].bytes == 5));
  CHECK(read_file(prefix + ".facegen-resume.2").compare(0, 31, "facegen resume manifest part 1\n") == 0);

  // Starting afresh removes the parts of the earlier manifest.
  start_resume_manifest(prefix, a_job("4"));
  CHECK(::access((prefix + ".facegen-resume.2").c_str(), F_OK) != 0);
  CHECK(read_resume_manifest(prefix)->units.empty());
}

TEST_CASE("resume manifest: a last line cut short is no record, and the next append cuts it off") {
  TempDir dir;
  const std::string prefix = dir.file("r");
  start_resume_manifest(prefix, a_job());
  const ContentDigest d = content_digest("x", 1);
  ManifestAppender(prefix, 0).append({OutputFormat::Tar, 0, 10, d}, "r-000000.tar");
  const std::string whole = read_file(prefix + ".facegen-resume");
  for (size_t cut : {size_t{1}, size_t{5}, size_t{40}}) {
    INFO("a line of " << cut << " bytes without its newline");
    write_file(prefix + ".facegen-resume", whole + std::string("unit tar 1 10 ").substr(0, cut));
    CHECK(read_resume_manifest(prefix)->units.size() == 1);
    ManifestAppender(prefix, 0).append({OutputFormat::Tar, 2, 10, d}, "r-000002.tar");
    const std::optional<ResumeManifest> read = read_resume_manifest(prefix);
    REQUIRE(read->units.size() == 2);
    CHECK(read->units[1].unit == 2);
    write_file(prefix + ".facegen-resume", whole);
  }
  // A part made and cut short before its first line holds nothing.
  write_file(prefix + ".facegen-resume.1", std::string("facegen resume"));
  CHECK(read_resume_manifest(prefix)->units.size() == 1);
  ManifestAppender(prefix, 1).append({OutputFormat::Tar, 3, 10, d}, "r-000003.tar");
  CHECK(read_resume_manifest(prefix)->units.size() == 2);
}

TEST_CASE("resume manifest: what facegen did not write is refused in one sentence naming the file and line") {
  TempDir dir;
  const std::string prefix = dir.file("r");
  start_resume_manifest(prefix, a_job());
  const std::string good = read_file(prefix + ".facegen-resume");
  struct Bad {
    std::string text, says;
  };
  const std::vector<Bad> bad = {
      {"facegen resume manifest 2\njob a b\n", "line 1 is not 'facegen resume manifest 1'"},
      {good + "unit tar 0 12 00112233445566778899aabbccddeeff\n", "line 6 is neither"},
      {good + "unit tar 0 12 00112233445566778899AABBCCDDEEFF r-000000.tar\n", "line 6 is neither"},
      {good + "unit tar -1 12 00112233445566778899aabbccddeeff r-000000.tar\n", "line 6 is neither"},
      {good + "unit tar 01 12 00112233445566778899aabbccddeeff r-000000.tar\n", "line 6 is neither"},
      {good + "unit gif 0 12 00112233445566778899aabbccddeeff r-000000.gif\n", "line 6 is neither"},
      {good + "unit tar 0 12 00112233445566778899aabbccddeeff r\njob --seed 4\n", "line 7 is not a unit line"},
      {"facegen resume manifest 1\n", "it records no job"},
      {"", "it holds no complete line"},
  };
  for (const Bad& b : bad) {
    INFO(b.text);
    write_file(prefix + ".facegen-resume", b.text);
    const std::string message = user_error_of([&] { read_resume_manifest(prefix); });
    CHECK(contains(message, "is not a resume manifest of this user's facegen (" + b.says));
    CHECK(contains(message, "move it away to start afresh"));
    CHECK(message.find('\n') == std::string::npos);
  }
  ::unlink((prefix + ".facegen-resume").c_str());
  REQUIRE(::symlink(dir.file("elsewhere").c_str(), (prefix + ".facegen-resume").c_str()) == 0);
  write_file(dir.file("elsewhere"), good);
  CHECK(contains(user_error_of([&] { read_resume_manifest(prefix); }), "(it is a symbolic link)"));
  CHECK(contains(user_error_of([&] { ManifestAppender(prefix, 0).append({}, "x"); }), "(it is a symbolic link)"));
  CHECK(read_file(dir.file("elsewhere")) == good);  // nothing written through the link
}

TEST_CASE("resume manifest: another job's fields are named, each with what it was and what it is") {
  JobDescription now = a_job("4");
  CHECK(job_differences(a_job(), now) == "--seed was 3, this run's is 4");
  now.push_back({"--png-level", "1"});
  now[3].value = "24";
  CHECK(job_differences(a_job(), now) ==
        "--seed was 3, this run's is 4; images was 23, this run's is 24; --png-level was not recorded, this run's is 1");
  JobDescription fewer = a_job();
  fewer.pop_back();
  CHECK(job_differences(a_job(), fewer) == "images was 23, this run's is not one of this facegen's");
  JobDescription odd = a_job();
  odd[1].value = "a\nb";  // a value as a line holds it
  CHECK(job_differences({{"program", "facegen test"}, {"--seed", "a?b"}, {"--formats", "tar"}, {"images", "23"}}, odd).empty());
}

TEST_CASE("piece plan over listed units: only those, each image once, in the list's order, never across a unit") {
  for (int64_t total : {1, 7, 100, 1001}) {
    for (int64_t unit : {1, 10, 333}) {
      const int64_t units = (total + unit - 1) / unit;
      for (uint64_t seed : {1u, 2u, 3u}) {
        std::vector<int64_t> listed;
        std::mt19937_64 random(seed * 1000 + static_cast<uint64_t>(total));
        for (int64_t u = 0; u < units; ++u)
          if (random() % 2) listed.push_back(u);
        for (int64_t piece : {1, 3, 64}) {
          for (int lanes : {1, 2, 5}) {
            PiecePlan plan(total, unit, piece, lanes, listed);
            std::vector<int> seen(static_cast<size_t>(total), 0);
            std::vector<int64_t> begun;  // units in the order their first piece came
            PieceRange p;
            bool good = true;
            while (plan.next(p)) {
              const int64_t u = p.first / unit;
              good &= p.count >= 1 && p.count <= piece && (p.first + p.count - 1) / unit == u;
              if (std::find(begun.begin(), begun.end(), u) == begun.end()) begun.push_back(u);
              for (int64_t i = p.first; i < p.first + p.count; ++i) ++seen[static_cast<size_t>(i)];
            }
            int64_t want = 0;
            bool exact = true;
            for (int64_t i = 0; i < total; ++i) {
              const bool in = std::find(listed.begin(), listed.end(), i / unit) != listed.end();
              want += in;
              exact &= seen[static_cast<size_t>(i)] == (in ? 1 : 0);
            }
            INFO("N " << total << ", unit " << unit << ", " << listed.size() << " units listed, piece " << piece
                      << ", lanes " << lanes);
            CHECK(good);
            CHECK(exact);
            CHECK(plan.images() == want);
            CHECK(begun == listed);  // lanes take the listed units in turn
          }
        }
      }
    }
  }
  CHECK_THROWS_AS(PiecePlan(20, 10, 5, 1, std::vector<int64_t>{2}), std::invalid_argument);
  PiecePlan none(20, 10, 5, 3, std::vector<int64_t>{});
  PieceRange p;
  CHECK_FALSE(none.next(p));
  CHECK(none.images() == 0);
}

TEST_CASE("files digest: the bytes of the files one after another; a missing file or a link is none") {
  TempDir dir;
  const std::string a = random_string(3 << 20, 1), b = random_string(17, 2);  // past one read of 1 MiB
  write_file(dir.file("a"), a);
  write_file(dir.file("b"), b);
  write_file(dir.file("empty"), "");
  const std::optional<FilesDigest> both = files_digest({dir.file("a"), dir.file("empty"), dir.file("b")});
  REQUIRE(both.has_value());
  CHECK(both->bytes == static_cast<int64_t>(a.size() + b.size()));
  CHECK(both->digest == content_digest((a + b).data(), a.size() + b.size()));
  CHECK(files_digest({dir.file("b")})->digest == content_digest(b.data(), b.size()));
  CHECK_FALSE(files_digest({dir.file("a"), dir.file("none")}).has_value());
  REQUIRE(::symlink(dir.file("a").c_str(), dir.file("link").c_str()) == 0);
  CHECK_FALSE(files_digest({dir.file("link")}).has_value());
  REQUIRE(::mkdir(dir.file("folder").c_str(), 0755) == 0);
  CHECK_FALSE(files_digest({dir.file("folder")}).has_value());
}

TEST_CASE("resume files: a recorded unit is kept while its files hold the recorded bytes and digest") {
  TempDir dir;
  const std::string prefix = dir.file("r");
  OutputOptions options;
  options.shard_images = 4;
  const std::vector<OutputFormat> formats = {OutputFormat::Tar, OutputFormat::Png};
  std::vector<OutputLayout> layouts;
  for (OutputFormat f : formats) layouts.emplace_back(f, prefix, 10, options);  // units of 4, 4 and 2
  start_resume_manifest(prefix, a_job());
  ResumeFiles files(layouts, 4, std::make_unique<ManifestAppender>(prefix, 0));
  REQUIRE(files.units() == 3);
  CHECK(files.unit_paths(1, 2) == std::vector<std::string>{prefix + "/000008.png", prefix + "/000009.png"});
  CHECK(files.unit_paths(0, 1) == std::vector<std::string>{prefix + "-000001.tar"});

  // Shards 0, 1 and 2, and the PNGs of unit 1, on disk; each recorded as record() records it.
  REQUIRE(::mkdir(prefix.c_str(), 0755) == 0);
  std::vector<std::string> shard(3);
  for (int64_t u = 0; u < 3; ++u) {
    shard[static_cast<size_t>(u)] = earlier_output(WrittenKind::Tar, random_string(100 + static_cast<size_t>(u), 10 + u));
    write_file(prefix + "-00000" + std::to_string(u) + ".tar", shard[static_cast<size_t>(u)]);
    files.record(OutputFormat::Tar, u);
  }
  std::string pngs;
  for (int i = 4; i < 8; ++i) {
    const std::string png = earlier_output(WrittenKind::Png, random_string(50, 20 + static_cast<uint64_t>(i)));
    write_file(prefix + "/00000" + std::to_string(i) + ".png", png);
    pngs += png;
  }
  files.record(OutputFormat::Png, 1);
  CHECK(files.made_files() == 3 + 4);
  const std::optional<ResumeManifest> manifest = read_resume_manifest(prefix);
  REQUIRE(manifest->units.size() == 4);
  CHECK(manifest->units[3].digest == content_digest(pngs.data(), pngs.size()));  // the PNGs one after another
  CHECK(contains(read_file(prefix + ".facegen-resume"), " r/000004.png ... r/000007.png\n"));
  CHECK(contains(read_file(prefix + ".facegen-resume"), " r-000002.tar\n"));

  auto verified = [&] {
    auto check = std::make_unique<ResumeFiles>(layouts, 4, std::make_unique<ManifestAppender>(prefix, 0));
    check->verify(read_resume_manifest(prefix)->units, 3);
    return check;
  };
  {
    const std::unique_ptr<ResumeFiles> held = verified();
    const ResumeFiles& check = *held;
    CHECK(check.kept(OutputFormat::Tar, 0));
    CHECK(check.kept(OutputFormat::Tar, 2));
    CHECK(check.kept(OutputFormat::Png, 1));
    CHECK_FALSE(check.kept(OutputFormat::Png, 0));  // never recorded
    CHECK(check.units_to_make() == std::vector<int64_t>{0, 2});
    CHECK(check.kept_files() == 3 + 4);
  }
  // One byte changed (same size), a shard cut short, a PNG removed, a shard replaced by a link: not kept.
  std::string changed = shard[0];
  changed[60] ^= 1;
  write_file(prefix + "-000000.tar", changed);
  write_file(prefix + "-000001.tar", shard[1].substr(0, shard[1].size() - 1));
  ::unlink((prefix + "/000006.png").c_str());
  ::unlink((prefix + "-000002.tar").c_str());
  write_file(dir.file("copy"), shard[2]);
  REQUIRE(::symlink(dir.file("copy").c_str(), (prefix + "-000002.tar").c_str()) == 0);
  {
    const std::unique_ptr<ResumeFiles> held = verified();
    const ResumeFiles& check = *held;
    for (int64_t u = 0; u < 3; ++u) CHECK_FALSE(check.kept(OutputFormat::Tar, u));
    CHECK_FALSE(check.kept(OutputFormat::Png, 1));
    CHECK(check.units_to_make() == std::vector<int64_t>{0, 1, 2});
    CHECK(check.kept_files() == 0);
  }
  // The verdict travels to another process's ResumeFiles as bytes.
  ResumeFiles other(layouts, 4, std::make_unique<ManifestAppender>(prefix, 1));
  std::vector<uint8_t> verdict(6, 0);
  verdict[1] = 1;  // tar, unit 1
  other.set_kept_bytes(verdict);
  CHECK(other.kept(OutputFormat::Tar, 1));
  CHECK_FALSE(other.kept(OutputFormat::Png, 1));
  CHECK_THROWS_AS(other.set_kept_bytes(std::vector<uint8_t>(5, 0)), std::logic_error);
}

TEST_CASE("dead temporaries: only this job's files' and manifest's temporaries, this user's, by facegen's names") {
  TempDir dir;
  const std::string prefix = dir.file("r");
  OutputOptions options;
  options.shard_images = 5;
  const std::vector<OutputLayout> layouts = {OutputLayout(OutputFormat::Tar, prefix, 20, options),
                                             OutputLayout(OutputFormat::Png, prefix, 20, options)};
  const std::vector<std::string> removed_names = {"r-000001.tar.tmp-Ab12Cd", "r-000003.tar.tmp-rp1234-Xy9z0Q",
                                                  "r.facegen-resume.tmp-q1W2e3"};
  const std::vector<std::string> kept_names = {
      "r-000004.tar.tmp-Ab12Cd",   // no shard 4 in this job (4 shards)
      "r.txt.tmp-Ab12Cd",          // another output than this job's
      "q-000001.tar.tmp-Ab12Cd",   // another prefix's
      "r-000001.tar.tmp-Ab12C",    // not six letters
      "r-000001.tar.tmp-Ab12C!",   // not letters and digits
      "r-000001.tar",              // a finished shard
      "r-000002.tar.tmp-ab-cd-Ab12Cd",  // not a token then six letters
  };
  for (const std::string& name : removed_names) write_file(dir.file(name), "x");
  for (const std::string& name : kept_names) write_file(dir.file(name), "x");
  // A dead run's PNG folder (its PNGs) goes; one holding anything else stays; a link stays.
  REQUIRE(::mkdir(dir.file("r.tmp-Fo1der").c_str(), 0755) == 0);
  write_file(dir.file("r.tmp-Fo1der/000003.png"), "png");
  REQUIRE(::mkdir(dir.file("r.tmp-Notes1").c_str(), 0755) == 0);
  write_file(dir.file("r.tmp-Notes1/notes.txt"), "mine");
  REQUIRE(::symlink(dir.file("r-000001.tar").c_str(), dir.file("r-000002.tar.tmp-L1nk00").c_str()) == 0);

  std::vector<std::string> removed = remove_dead_temporaries(prefix, layouts, prefix + ".facegen-resume");
  std::sort(removed.begin(), removed.end());
  std::vector<std::string> want = removed_names;
  want.push_back("r.tmp-Fo1der");
  std::sort(want.begin(), want.end());
  CHECK(removed == want);
  for (const std::string& name : kept_names) CHECK(read_file(dir.file(name)) == "x");
  CHECK(read_file(dir.file("r.tmp-Notes1/notes.txt")) == "mine");
  struct stat st;
  CHECK(::lstat(dir.file("r-000002.tar.tmp-L1nk00").c_str(), &st) == 0);
}

TEST_CASE("sinks with --resume: each shard in place and recorded as it is finished, kept units passed over") {
  TempDir dir;
  const std::string prefix = dir.file("r");
  const int64_t n = 11;
  std::vector<float> images(static_cast<size_t>(n) * 4096 * 3);
  std::mt19937_64 random(7);
  for (float& v : images) v = static_cast<float>(static_cast<int64_t>(random() % 2001) - 1000) / 1000.0f;
  SinkOptions options;
  options.shard_images = 4;
  options.threads = 2;
  const OutputOptions layout_options = output_options(options);
  // The bytes of an all-or-nothing run, for comparison.
  {
    std::unique_ptr<ImageSink> whole = make_sink(OutputFormat::NpyU8, dir.file("w"), n, options);
    whole->append(images.data(), 0, n);
    whole->commit();
  }
  start_resume_manifest(prefix, a_job());
  ResumeFiles files({OutputLayout(OutputFormat::NpyU8, prefix, n, layout_options)}, 4,
                    std::make_unique<ManifestAppender>(prefix, 0));
  std::vector<uint8_t> verdict = {0, 1, 0};  // unit 1 kept: its shard is not written
  files.set_kept_bytes(verdict);
  options.resume = &files;
  std::unique_ptr<ImageSink> sink = make_sink(OutputFormat::NpyU8, prefix, n, options);
  CHECK(dir.names() == std::vector<std::string>{"r.facegen-resume", "w-000000.u8.npy", "w-000001.u8.npy",
                                                "w-000002.u8.npy"});  // nothing made before its images
  const ImageRun run = ImageRun::floats(images.data(), 3, 64);
  sink->write_run(run, 0, 3, RecordRun(), 0, 1);
  CHECK(::access((prefix + "-000000.u8.npy").c_str(), F_OK) != 0);  // 3 of 4 images
  sink->write_run(run.skip(3), 3, 1, RecordRun(), 0, 1);
  CHECK(read_file(prefix + "-000000.u8.npy") == read_file(dir.file("w-000000.u8.npy")));  // in place at once
  CHECK(read_resume_manifest(prefix)->units.size() == 1);
  sink->write_run(run.skip(4), 4, 4, RecordRun(), 0, 1);  // a kept unit: passed over
  CHECK(::access((prefix + "-000001.u8.npy").c_str(), F_OK) != 0);
  sink->write_run(run.skip(8), 8, 3, RecordRun(), 0, 1);
  CHECK(sink->finish().empty());  // nothing left to rename
  sink->committed();
  CHECK(read_file(prefix + "-000002.u8.npy") == read_file(dir.file("w-000002.u8.npy")));
  const std::optional<ResumeManifest> manifest = read_resume_manifest(prefix);
  REQUIRE(manifest->units.size() == 2);
  CHECK(manifest->units[1].unit == 2);
  CHECK(files.made_files() == 2);
  sink.reset();
  for (const std::string& name : dir.names()) CHECK(name.find(".tmp-") == std::string::npos);
}
