// ordered_output.hpp: the MPI-IO driver of the output formats: every rank writes its own images
// into the job's output files at the offsets files/output_format.hpp defines, so the files are byte
// for byte those of one process, for every format (txt, bmp and its split, npy, png, mosaic-png).
//
// Rank 0 creates the files as temporaries beside their final paths (OutputFiles: headers written,
// sizes set, removed if the job fails or is stopped); every rank opens them with MPI_File_open, each
// a handle of its own (MPI_COMM_SELF: ordered_output.cpp says why). Each round a rank hands its slice of images to a writer thread of its own (when MPI gives
// MPI_THREAD_MULTIPLE; otherwise the round is written at once), which writes it while the rank
// generates the next round, on the rank's CPU threads. Records (txt lines, tar samples) vary in
// length: after making its slice's, each rank learns from an exclusive scan over the ranks (on a
// communicator of the writer's own), per file of the round, where its records start, and from a sum
// where the next round's start (write_record_run, RecordEnds). A mosaic PNG's
// pixels go to scratch pixel files; at finish() rank r encodes mosaic files r, r + ranks, ... Then
// rank 0 syncs every file and commits the whole set all or nothing (output_commit.hpp).
// No list of the job's files is kept: the first file of each output is created and opened up front,
// a numbered file (a mosaic, a shard) when the first round reaches it (rank 0 creates it, the ranks
// open it together) and it is closed by the round that completes it, so memory and descriptors follow the
// files a job has actually begun, not N.
// Memory per rank: two rounds of images, one round's records (about 86 KB per image of text, 9 KB of
// tar), a tile-row part per writer thread.
#pragma once

#include <mpi.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "files/image_sink.hpp"
#include "files/mapped_write.hpp"
#include "files/output_files.hpp"
#include "files/output_format.hpp"
#include "mpi/agreement.hpp"
#include "mpi/work_split.hpp"

namespace facegen {
namespace mpi {

class MpiFiles;

class OrderedOutputs {
 public:
  // Nothing is checked yet (see prepare()); `options.threads` is this rank's writer threads.
  OrderedOutputs(MPI_Comm comm, std::string prefix, std::vector<OutputFormat> formats, int64_t total_images,
                 SinkOptions options, int64_t round_images);
  ~OrderedOutputs();
  OrderedOutputs(const OrderedOutputs&) = delete;
  OrderedOutputs& operator=(const OrderedOutputs&) = delete;

  // Every rank: the formats' files for N images (a mosaic beyond 2 GiB, a bad tile limit fail here,
  // the same on every rank). Errors go into `status`.
  void prepare(RankStatus& status);
  // Rank 0 only (others: nothing): create the temporary files with their headers and sizes.
  void create();
  // Collective: every rank opens every temporary file; starts the writer thread. Errors go into `status`.
  void open(RankStatus& status);

  // A free buffer for one round's images (round_images, 64, 64, nc) in encoding(); waits while the
  // writer holds both.
  void* next_buffer();
  ImageEncoding encoding() const { return encoding_; }  // image_encoding_for(the formats)
  // Every rank, every round, in order (a rank with no images passes an empty slice): the writer
  // writes images (slice.size(), 64, 64, nc) from `buffer` to every output. A rank that has failed
  // still takes part in the exchange of text offsets, writing nothing.
  // `all` is the round's images over every rank; the mosaic files it reaches are opened before it is
  // written and those it completes closed after (collective on the writer's communicator).
  void submit_round(void* buffer, ImageRange all, ImageRange slice, const RankStatus& status);
  // Adds the writer's failure, if any, to `status` (without waiting).
  void collect_errors(RankStatus& status);
  // Collective: waits until every submitted round is written (then collect_errors), encodes the
  // mosaic PNGs, syncs and closes the files. Call once, also when the job stops early.
  void finish(RankStatus& status);
  // Rank 0 only: every byte on disk, then every output into place at once. Throws UserError.
  void commit();

  std::vector<std::string> final_paths() const;
  double write_seconds() const;        // the writer's busy time: formatting, converting, writing
  int64_t bytes_written() const;       // this rank's bytes into the outputs
  std::vector<int64_t> bytes_per_format() const;  // the same, per format, in the order given

 private:
  struct Round {
    void* buffer;
    ImageRange all;    // the round, every rank's images
    ImageRange slice;  // this rank's
    bool skip;  // the rank has failed: only the text exchange
  };
  void writer_loop();
  void write_round(const Round& round);
  ImageRun buffer_run(const void* buffer) const { return {encoding_, buffer, options_.image_channels}; }
  OutputFile job_file(size_t index) const;  // file `index` of the job's flat list, over every layout
  void open_job_files(const std::vector<size_t>& indices, RankStatus& status);  // collective
  void encode_mosaic_pngs(RankStatus& status);                                  // collective

  MPI_Comm comm_;        // the job's, for open/finish
  MPI_Comm write_comm_;  // the writer thread's, for the text offsets
  int rank_ = 0;
  int ranks_ = 1;
  std::string prefix_;
  std::vector<OutputFormat> formats_;
  int64_t total_;
  SinkOptions options_;
  int64_t round_images_;
  bool threaded_ = false;  // MPI_THREAD_MULTIPLE: a writer thread; else rounds are written in submit_round

  std::vector<OutputLayout> layouts_;
  std::vector<size_t> first_file_;         // index of each layout's first file in the flat list
  size_t file_count_ = 0;                  // files of every layout (computed, never listed)
  std::unique_ptr<OutputFiles> created_;   // rank 0
  std::unique_ptr<MpiFiles> files_;        // every rank, after open()
  RecordRun record_blocks_;
  std::vector<std::unique_ptr<RecordEnds>> record_ends_;  // per layout: where the next round's records go

  ImageEncoding encoding_;
  std::vector<std::unique_ptr<char[]>> storage_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<void*> free_;
  std::deque<Round> queue_;
  bool stopping_ = false;
  RankStatus writer_status_;
  double write_seconds_ = 0;
  WriteWayTrial write_way_;  // pwrite/MPI-IO or mapped writes, by measuring the first rounds (writer thread)
  std::thread writer_;
};

}  // namespace mpi
}  // namespace facegen
