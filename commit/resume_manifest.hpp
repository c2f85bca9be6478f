// resume_manifest.hpp: the record, beside a --resume run's outputs, of the job and of each file it
// finished, so that a later run of the same job keeps those files and makes only the rest.
//
// PREFIX.facegen-resume (named after the prefix, beside its outputs, so that several prefixes in
// one folder keep theirs apart and `ls PREFIX*` shows it; a list of finished files and their
// digests that is worth keeping once the job is done), text, one record a line:
//   facegen resume manifest 1
//   job NAME VALUE            what decides the outputs' bytes (run/resume_job.hpp), in a fixed order
//   ...
//   unit FORMAT U BYTES XXH3 NAMES
//                             unit U of the output FORMAT (tar, png, npy, npy-u8) is finished and in
//                             place: its files (a shard; a group of the PNG folder's files, in index
//                             order) hold BYTES bytes whose XXH3-128 (common/content_hash.hpp; of a
//                             shard alone, what xxh128sum prints for it) is XXH3; NAMES says which
//                             files those are, for people ("r-000003.tar", "r/000200.png ... r/000399.png")
// The job lines are written once, when a run starts afresh (atomically: a temporary renamed, synced);
// each unit line is appended, with one write and synced, as its files are put in place. Every other
// process of an MPI job (rank R >= 1) appends its own lines to PREFIX.facegen-resume.R, which begins
// "facegen resume manifest part 1": appends from several nodes into one file could interleave on a
// network file system (NFS has no atomic append), appends into a file of one's own cannot.
//
// A line cut short by a kill or a crash (no newline at the end of a file) is not a record: reading
// leaves it out, and the next append to that file first cuts it off. Anything else that is not as
// above is refused in one sentence (UserError) naming the file and the line. The manifest is read
// only as a regular file of this user's (no link followed), of at most kMaxManifestBytes.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/content_hash.hpp"
#include "formats/output_format.hpp"

namespace facegen {

// One thing that decides the outputs' bytes: a flag ("--seed") or what it stands for ("model-xxh3"),
// and its value in one line.
struct JobField {
  std::string name;   // no spaces
  std::string value;  // no newline (one_line())
};
using JobDescription = std::vector<JobField>;

// `text` as a manifest line holds it: control characters as '?'.
std::string one_line(const std::string& text);

// One finished unit of one output: its files' bytes and digest.
struct UnitRecord {
  OutputFormat format = OutputFormat::Tar;
  int64_t unit = 0;
  int64_t bytes = 0;
  ContentDigest digest;
};

struct ResumeManifest {
  JobDescription job;
  std::vector<UnitRecord> units;  // of the manifest, then of its parts; a unit may come more than once
};

constexpr int64_t kMaxManifestBytes = int64_t{1} << 30;

// PREFIX.facegen-resume.
std::string resume_manifest_path(const std::string& prefix);

// The manifest of `prefix` and its parts; nullopt where PREFIX.facegen-resume does not exist. Throws
// UserError where it or a part is not one that this user's facegen wrote.
std::optional<ResumeManifest> read_resume_manifest(const std::string& prefix);

// What differs between the job a manifest records and this run's, as "--seed was 3, this run's is 4"
// for each field that differs, joined by "; "; "" when none does.
std::string job_differences(const JobDescription& recorded, const JobDescription& now);

// Starts the manifest of `prefix` afresh: every part of an earlier one removed, then the manifest
// written with `job` and no unit (a temporary renamed into place, synced). Throws UserError.
void start_resume_manifest(const std::string& prefix, const JobDescription& job);

// Appends unit records to one file of the manifest: part 0, the manifest itself (a single process,
// rank 0), or part R (rank R), made at the first append. Any thread; each line is on the storage
// when append() returns. Throws UserError naming the file.
class ManifestAppender {
 public:
  ManifestAppender(std::string prefix, int part);
  ~ManifestAppender();
  ManifestAppender(const ManifestAppender&) = delete;
  ManifestAppender& operator=(const ManifestAppender&) = delete;

  // names: which files, for people (one line).
  void append(const UnitRecord& record, const std::string& names);
  const std::string& path() const { return path_; }

 private:
  void open_file();  // with mutex_ held

  std::string path_;
  bool part_;
  std::mutex mutex_;
  int fd_ = -1;
};

}  // namespace facegen
