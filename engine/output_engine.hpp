// output_engine.hpp: images from the generator to finished files, with every stage busy.
//
// The engine owns a ring of piece buffers, each (piece_images, S, S, nc) floats or (piece_images,
// S, S, 3) bytes (formats/image_run.hpp). The generating thread takes a free buffer (acquire), fills
// it with images [first, first + count) and hands it over (submit); pieces may come in any order
// (engine/piece_plan.hpp decides it), as long as the pieces of one file of records (a txt file, a tar
// shard) come in image order. Each submitted piece becomes one task per output on the process's pool
// (common/work_pool.hpp), which runs the sink's steps (engine/image_sink.hpp): it makes what needs no
// other piece (a format of records makes the piece's records), then the pieces of one file are placed
// in the order they came, each after the one before (a counter per file, no thread waits for
// another), and written one at a time, in that order, by whichever task placed them: Linux takes one
// writer into a file at a time, and writers that wait for it spin.
// Loops inside a task (a piece's images encoded on several threads) are helped by idle workers, so
// many files are made and written at once, as many as the pieces in flight reach. A buffer goes back
// to the ring when every output has written its piece; when none is free, acquire() waits, so memory
// never grows with N. The first error of any task is rethrown on the generating thread at its next
// acquire(), submit() or finish(); after it, tasks write nothing more and the buffers come back.
// Where the generator makes the outputs' bytes itself (EngineOptions::encoded_runs: a GPU's encoders),
// a buffer also holds, for each output whose format has an encoder, the piece's run in that format's
// bytes (formats/encoded_run.hpp), planned by plan_encoded() before the images are made; the sinks
// then write those bytes as they lie, and the pixels come only where an output still needs them.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "formats/image_run.hpp"
#include "engine/image_sink.hpp"
#include "formats/output_format.hpp"
#include "generator/backend.hpp"

namespace facegen {

struct EngineOptions {
  int64_t piece_images = 1024;  // images per buffer
  int buffers = 4;              // pieces in flight between the generator and the files
  int threads = 0;              // threads a piece's loops may use (<= 0: every CPU)
  ImageEncoding encoding = ImageEncoding::Float32;  // what the buffers hold
  int image_channels = 3;       // nc of the images
  int image_size = kDefaultImageSize;  // their pixels a side
  // Told, on the thread that finished it, each piece once every output has written it.
  std::function<void(int64_t first, int64_t count)> on_written;
  // Where the buffers' memory comes from (the backend's allocate_host: page-locked for a GPU); plain
  // memory when empty.
  std::function<HostBuffer(size_t bytes)> allocate;
  // The generator makes each 8-bit output's bytes where its format has an encoder (the backend's
  // makes_encoded_runs()).
  bool encoded_runs = false;
};

// A free buffer of the ring: room for piece_images images, and a scan flag each
// (generator/finite_check.hpp) for the generator's use.
struct PieceBuffer {
  void* images = nullptr;
  uint8_t* flags = nullptr;
};

class OutputEngine {
 public:
  // The sinks stay the caller's; they outlive the engine.
  OutputEngine(std::vector<ImageSink*> sinks, const EngineOptions& options);
  ~OutputEngine();  // waits for the tasks in flight; writes nothing more
  OutputEngine(const OutputEngine&) = delete;
  OutputEngine& operator=(const OutputEngine&) = delete;

  ImageEncoding encoding() const { return options_.encoding; }
  int64_t piece_images() const { return options_.piece_images; }

  PieceBuffer acquire();  // a free buffer; waits while every buffer is in flight
  // The runs the generator is to make of images [first, first + count) in `buffer`, planned now
  // (ImageTarget::encoded), or null where the engine takes none; submit() then gives those images.
  const EncodedRuns* plan_encoded(const PieceBuffer& buffer, int64_t first, int64_t count);
  void submit(void* images, int64_t first, int64_t count);  // images [first, first + count) in a buffer's images
  void finish();    // waits until every piece is written; rethrows the first error

  double write_seconds() const;  // summed over the tasks: making, placing and writing
  double wait_seconds() const;   // time acquire() waited for a free buffer

 private:
  struct Piece;
  struct FileOrder;  // the pieces of one file of records, placed in image order
  void run_output(Piece& piece, size_t output) noexcept;
  void place_in_order(Piece& piece, size_t output, int64_t bytes) noexcept;
  void write_placed(Piece& piece, size_t output, int64_t start) noexcept;
  void output_done(Piece& piece) noexcept;
  void fail(std::exception_ptr error);
  Piece& piece_of(void* images);           // the piece whose buffer starts at `images`
  ImageRun run_of(const Piece& piece, size_t output) const;  // what output `output` writes of a piece
  void rethrow_if_failed();  // with mutex_ held

  std::vector<ImageSink*> sinks_;
  EngineOptions options_;
  std::vector<std::unique_ptr<Piece>> pieces_;
  bool pixels_ = true;                        // the buffers hold the pixels (an output needs them)
  std::vector<EncodedCapacity> encoded_;      // per output: its encoded run's memory (0 bytes: none)

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Piece*> free_;
  int in_flight_ = 0;  // pieces submitted and not yet written by every output
  int tasks_ = 0;      // tasks posted and not yet ended (they may touch the engine after their piece is done)
  std::exception_ptr error_;
  double write_seconds_ = 0;
  double wait_seconds_ = 0;
  std::map<std::pair<size_t, int64_t>, FileOrder> orders_;  // (output, file): the files being placed
};

}  // namespace facegen
