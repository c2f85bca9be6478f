// resume_files.hpp: what a --resume run keeps and makes, unit by unit, and the record of each unit it
// puts in place.
//
// The job's images are cut into units (engine/piece_plan.hpp, unit_images_for), and so is each of its
// outputs, all of them made of many files (is_made_of_many_files): unit u of a tar, npy or npy-u8
// output is its shard u; unit u of the PNG folder is the group of its files of the unit's images. A
// unit of an output is kept when the manifest (commit/resume_manifest.hpp) records it and its files
// are there with the recorded bytes and digest; a unit is made again when any output's is not kept,
// and then only the outputs whose files are not kept are written (the sinks skip the others).
//
// Every process of a job holds one: the single process or rank 0 checks the manifest's records
// against the files (verify()), the other ranks get its verdict (kept_bytes()). Each process appends
// the units it puts in place to its own file of the manifest (record(): the files are read back for
// their digest, the one definition of a unit's bytes and digest that verify() checks).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commit/resume_manifest.hpp"
#include "formats/output_format.hpp"

namespace facegen {

class ResumeFiles {
 public:
  // The job's outputs, its unit and N; appender: where this process's records go.
  ResumeFiles(std::vector<OutputLayout> layouts, int64_t unit_images, std::unique_ptr<ManifestAppender> appender);

  int64_t unit_images() const { return unit_; }
  int64_t units() const { return units_; }

  // Checks the manifest's records against the files on `threads` threads (<= 0: every CPU): a unit
  // whose every file is there, a regular file, with the recorded bytes and digest is kept. Records
  // of outputs or units that this job does not have are passed over.
  void verify(const std::vector<UnitRecord>& records, int threads);
  // The verdict, one byte per output and unit, for the other ranks of a job.
  const std::vector<uint8_t>& kept_bytes() const { return kept_; }
  void set_kept_bytes(std::vector<uint8_t> kept);

  bool kept(OutputFormat format, int64_t unit) const;
  // The units of which some output's files are not kept, in order: what the run makes.
  std::vector<int64_t> units_to_make() const;

  // Unit `unit` of the output `format` was put in place: the bytes and digest of its files go into the
  // manifest. Any thread. Throws UserError when a file cannot be read back or the record not written.
  void record(OutputFormat format, int64_t unit);

  int64_t kept_files() const;                       // the files of the kept units (each PNG counts)
  int64_t made_files() const { return made_files_; }  // the files this process put in place

  // The files of unit `unit` of output `output`: its shard, or the PNGs of its images, in order.
  std::vector<std::string> unit_paths(size_t output, int64_t unit) const;

 private:
  size_t output_of(OutputFormat format) const;

  std::vector<OutputLayout> layouts_;
  int64_t unit_;
  int64_t units_;
  std::vector<uint8_t> kept_;  // (outputs, units)
  std::unique_ptr<ManifestAppender> appender_;
  std::atomic<int64_t> made_files_{0};
};

// The bytes of the files at `paths` together and the digest of their bytes one after another
// (XXH3-128, common/content_hash.hpp); nullopt where one is missing or not a regular file (a link is
// not followed). Throws UserError where one cannot be read.
struct FilesDigest {
  int64_t bytes = 0;
  ContentDigest digest;
};
std::optional<FilesDigest> files_digest(const std::vector<std::string>& paths);

}  // namespace facegen
