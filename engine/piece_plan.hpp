// piece_plan.hpp: the order in which a job's images are generated, in pieces, so that many output
// files are written at once. Pure arithmetic, unit-tested alone.
//
// The images [0, N) are cut into units of unit_images (the last may be shorter): whole files of the
// job's outputs of many files (a tar or npy shard, a mosaic file), so that a unit's images all land in
// the same files. The plan covers all N images (one process) or the images [first, end) of an MPI
// rank's share, whose units are clipped to it (a share is whole units wherever a unit is a file;
// where the unit is all of N, the share is its own unit). `lanes` units are worked on at once: the plan hands out one piece of at
// most piece_images images from each lane in turn, in image order within a unit and never across a
// unit's end, and a lane whose unit is done takes the next unit not yet begun. With one lane the
// pieces come in image order. Each piece lies in one unit, so in one file of every output whose files
// are units (engine/output_engine.hpp needs that of a file of records).
#pragma once

#include <cstdint>
#include <vector>

#include "formats/output_format.hpp"

namespace facegen {

struct PieceRange {
  int64_t first = 0;
  int64_t count = 0;
};

class PiecePlan {
 public:
  // unit_images <= 0: one unit of N images. piece_images >= 1, lanes >= 1.
  PiecePlan(int64_t total_images, int64_t unit_images, int64_t piece_images, int lanes);
  // The same over the images [first_image, end_image) alone.
  PiecePlan(int64_t total_images, int64_t unit_images, int64_t piece_images, int lanes, int64_t first_image,
            int64_t end_image);
  // The same over the listed units alone, in the list's order (each < units(); unit_images >= 1): a run
  // with --resume makes only the units whose files are not finished yet.
  PiecePlan(int64_t total_images, int64_t unit_images, int64_t piece_images, int lanes,
            std::vector<int64_t> listed_units);

  int64_t units() const { return units_; }  // of the whole job
  int64_t unit_images() const { return unit_; }
  PieceRange unit(int64_t u) const;  // unit u's images within the plan's range
  int64_t images() const;  // the plan's images
  // The next piece; false once every piece was handed out.
  bool next(PieceRange& piece);

 private:
  struct Lane {
    int64_t next = 0;  // the lane's next image
    int64_t end = 0;   // one past its unit's last
  };
  bool take_unit(Lane& lane);

  int64_t total_;
  int64_t unit_;
  int64_t piece_;
  int64_t units_;
  int64_t first_image_, end_image_;
  int64_t first_unit_, end_unit_;
  int64_t next_unit_;            // with a list, the next unit's place in it
  std::vector<int64_t> listed_;  // the listed units, where the plan was given a list
  bool listed_plan_ = false;
  std::vector<Lane> lanes_;
  size_t turn_ = 0;
};

// The unit of a job: the images of one file of its outputs of numbered files: a tar, npy or npy-u8
// shard (every sharded output has the same shard size), else a mosaic file where the mosaic is split,
// else, with --resume (png_group_images), a group of the PNG folder's files, else a subfolder of the
// PNG folder's subfolders layout; 0 (one unit) where every output is one file or a flat folder of one
// file per image.
int64_t unit_images_for(const std::vector<OutputFormat>& formats, const OutputOptions& options, int64_t total_images);

// The run of images at whose edges every output's files begin, so that processes that split the job
// there never share a file (an MPI job, mpi/work_split.hpp): a common multiple of every output's file
// (a shard, a mosaic file; one image for a flat folder of PNGs, a subfolder, a group with --resume; N for an output of one file, txt and the
// unsplit npy and mosaics). N where that is N or more: one process then makes everything.
int64_t split_unit_images(const std::vector<OutputFormat>& formats, const OutputOptions& options, int64_t total_images);

// Whether the job's images must come in image order: a txt output (one file of records, all of N) or
// latents read in order only (a pipe).
bool needs_image_order(const std::vector<OutputFormat>& formats, bool random_access_latents);

}  // namespace facegen

namespace facegen {

// How a job's images flow from the generator to the files: pieces, units, lanes and the buffers in
// flight, from its outputs, N, the process's threads and the bytes of one image in its buffers.
struct JobFlow {
  int64_t piece_images = 1;
  int64_t unit_images = 0;  // 0: one unit
  int lanes = 1;
  int buffers = 4;
};
constexpr int64_t kDefaultPieceBytes = int64_t{12} << 20;   // 1,024 images of 8-bit pixels, 256 of floats
constexpr int64_t kMaxInFlightBytes = int64_t{512} << 20;   // every buffer of the ring together, past 4
// piece_images > 0 (--chunk): the pieces' size as given. ordered: needs_image_order().
JobFlow job_flow(const std::vector<OutputFormat>& formats, const OutputOptions& options, int64_t total_images,
                 int threads, int64_t bytes_per_image, int64_t piece_images, bool ordered);

}  // namespace facegen
