// output_engine.cpp: the ring of piece buffers and the tasks that write them (see output_engine.hpp).
#include "engine/output_engine.hpp"

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <utility>

#include "common/clock.hpp"
#include "common/threads.hpp"
#include "common/work_pool.hpp"

namespace facegen {

struct OutputEngine::Piece {
  // (piece_images, S, S, nc) in the engine's encoding where it holds pixels, then each encoded
  // output's run (at encoded_at)
  HostBuffer storage{nullptr, nullptr};
  HostBuffer flags{nullptr, nullptr};    // (piece_images)
  int64_t first = 0;
  int64_t count = 0;
  int64_t planned_first = 0;              // the images plan_encoded() planned, or count -1
  int64_t planned_count = -1;
  std::vector<int64_t> encoded_at;        // per output: where its encoded run starts in storage
  std::vector<HostBuffer> plans;          // per output: its encoded run's plan (empty: none)
  std::vector<EncodedRun> encoded;        // per output
  EncodedRuns runs;                       // the encoded outputs' runs, for the generator
  std::atomic<int> outputs_left{0};
  std::vector<RecordRun> records;  // per output: the piece's records (formats of records)
  std::vector<int64_t> file;       // per output: the file it writes into (write_file)
  std::vector<uint64_t> order;     // per output: its place among that file's pieces
  std::vector<int64_t> bytes;      // per output: its records' bytes, once made
  std::vector<int64_t> start;      // per output: where they go, once placed
  std::vector<Piece*> placed_next; // per output: the next piece placed and waiting to be written (a list)
};

// A file's pieces are placed in the order they were submitted, and written one at a time, in that
// order, by whichever task placed them (the kernel takes one writer into a file at a time, and
// writers that wait for it spin). Nothing here allocates once the file's order exists (its slots
// are made with it, in submit()), so that placing and writing never fail for want of memory.
struct OutputEngine::FileOrder {
  int64_t end = 0;          // where the next piece's records go
  uint64_t assigned = 0;    // pieces submitted so far
  uint64_t next = 0;        // the next piece to place
  int64_t placed_images = 0;
  int waiting = 0;          // pieces made and not yet placed
  // Pieces whose records are made, by their place modulo the ring's size: at most that many of a
  // file's pieces are in flight.
  std::vector<Piece*> made;
  Piece* to_write = nullptr;   // placed, not yet written: a list through placed_next, in order
  Piece** to_write_end = &to_write;
  bool writing = false;        // a task is writing this file's pieces
};

namespace {
constexpr int64_t kRegionAlign = 4096;  // each encoded run's bytes start on a page
int64_t page_aligned(int64_t bytes) { return (bytes + kRegionAlign - 1) / kRegionAlign * kRegionAlign; }
}  // namespace

OutputEngine::OutputEngine(std::vector<ImageSink*> sinks, const EngineOptions& options)
    : sinks_(std::move(sinks)), options_(options), encoded_(sinks_.size()) {
  if (options_.piece_images < 1 || options_.buffers < 1) throw std::invalid_argument("OutputEngine: empty pieces or no buffers");
  options_.threads = resolve_threads(options_.threads);
  // Encoded runs are made from 8-bit pixels, for the outputs whose format has an encoder; the pixels
  // stay where any other output needs them.
  if (options_.encoded_runs && options_.encoding == ImageEncoding::Rgb8) {
    pixels_ = false;
    for (size_t o = 0; o < sinks_.size(); ++o) {
      const OutputLayout* layout = sinks_[o]->layout();
      if (layout && layout->encoded_kind() != EncodedKind::None) {
        encoded_[o] = layout->encoded_capacity(options_.piece_images);
      } else {
        pixels_ = true;
      }
    }
  }
  // The pixels first, then each encoded run on a page of its own.
  std::vector<int64_t> encoded_at(sinks_.size(), 0);
  int64_t bytes =
      pixels_ ? options_.piece_images * image_bytes(options_.encoding, options_.image_channels, options_.image_size) : 0;
  for (size_t o = 0; o < sinks_.size(); ++o) {
    if (encoded_[o].bytes == 0) continue;
    encoded_at[o] = bytes = page_aligned(bytes);
    bytes += encoded_[o].bytes;
  }
  for (int b = 0; b < options_.buffers; ++b) {
    auto piece = std::make_unique<Piece>();
    const std::function<HostBuffer(size_t)> allocate =
        options_.allocate ? options_.allocate : std::function<HostBuffer(size_t)>(plain_host_buffer);
    piece->storage = allocate(static_cast<size_t>(bytes));
    piece->flags = allocate(static_cast<size_t>(options_.piece_images));
    piece->encoded_at = encoded_at;
    piece->encoded.resize(sinks_.size());
    for (size_t o = 0; o < sinks_.size(); ++o) {
      piece->plans.emplace_back(nullptr, nullptr);
      if (encoded_[o].bytes > 0) piece->plans.back() = allocate(static_cast<size_t>(encoded_[o].plan_bytes));
    }
    piece->records.resize(sinks_.size());
    piece->file.assign(sinks_.size(), -1);
    piece->order.assign(sinks_.size(), 0);
    piece->bytes.assign(sinks_.size(), 0);
    piece->start.assign(sinks_.size(), 0);
    piece->placed_next.assign(sinks_.size(), nullptr);
    free_.push_back(piece.get());
    pieces_.push_back(std::move(piece));
  }
}

OutputEngine::~OutputEngine() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!error_) error_ = std::make_exception_ptr(std::runtime_error("the output engine was stopped"));
  changed_.wait(lock, [&] { return in_flight_ == 0 && tasks_ == 0; });
}

void OutputEngine::rethrow_if_failed() {
  if (error_) std::rethrow_exception(error_);
}

void OutputEngine::fail(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!error_) error_ = error;
  changed_.notify_all();
}

PieceBuffer OutputEngine::acquire() {
  const auto start = Clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !free_.empty() || error_; });
  rethrow_if_failed();
  Piece* piece = free_.back();
  free_.pop_back();
  piece->planned_count = -1;
  wait_seconds_ += seconds_since(start);
  return {piece->storage.get(), static_cast<uint8_t*>(piece->flags.get())};
}

OutputEngine::Piece& OutputEngine::piece_of(void* images) {
  for (auto& p : pieces_) {
    if (p->storage.get() == images) return *p;
  }
  throw std::logic_error("OutputEngine: not one of its buffers");
}

const EncodedRuns* OutputEngine::plan_encoded(const PieceBuffer& buffer, int64_t first, int64_t count) {
  Piece& piece = piece_of(buffer.images);
  piece.runs.pixels = pixels_;
  piece.runs.runs.clear();
  for (size_t o = 0; o < sinks_.size(); ++o) {
    if (encoded_[o].bytes == 0) continue;
    const EncodedMemory memory{static_cast<unsigned char*>(piece.storage.get()) + piece.encoded_at[o], encoded_[o].bytes,
                               static_cast<unsigned char*>(piece.plans[o].get()), encoded_[o].plan_bytes};
    sinks_[o]->layout()->plan_encoded_run(first, count, memory, piece.encoded[o], options_.threads);
    piece.runs.runs.push_back(&piece.encoded[o]);
  }
  if (piece.runs.runs.empty()) return nullptr;
  piece.planned_first = first;
  piece.planned_count = count;
  return &piece.runs;
}

ImageRun OutputEngine::run_of(const Piece& piece, size_t output) const {
  ImageRun images{options_.encoding, pixels_ ? piece.storage.get() : nullptr, options_.image_channels, options_.image_size};
  if (encoded_[output].bytes > 0) images.encoded = &piece.encoded[output];
  return images;
}

void OutputEngine::submit(void* images, int64_t first, int64_t count) {
  Piece* piece = &piece_of(images);
  if (count < 0 || count > options_.piece_images) throw std::logic_error("OutputEngine::submit: a piece of the wrong size");
  const bool encoded = std::any_of(encoded_.begin(), encoded_.end(), [](const EncodedCapacity& c) { return c.bytes > 0; });
  if (encoded && (piece->planned_first != first || piece->planned_count != count)) {
    throw std::logic_error("OutputEngine::submit: images other than those plan_encoded() planned");
  }
  piece->first = first;
  piece->count = count;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_) {
      free_.push_back(piece);
      rethrow_if_failed();
    }
    for (size_t o = 0; o < sinks_.size(); ++o) {
      piece->file[o] = sinks_[o]->write_file(first);
      auto [found, fresh] = orders_.try_emplace({o, piece->file[o]});
      if (fresh) {
        found->second.end = sinks_[o]->write_file_begin(piece->file[o]);
        found->second.made.assign(pieces_.size(), nullptr);
      }
      piece->order[o] = found->second.assigned++;
    }
    if (sinks_.empty()) {
      free_.push_back(piece);
      changed_.notify_all();
      return;
    }
    piece->outputs_left.store(static_cast<int>(sinks_.size()));
    ++in_flight_;
    tasks_ += static_cast<int>(sinks_.size());
  }
  for (size_t o = 0; o < sinks_.size(); ++o) {
    WorkPool::process().post([this, piece, o] {
      run_output(*piece, o);
      // The task's last touch of the engine: a piece's last output_done() may be what lets finish()
      // and the destructor go on, and a task may still be placing other pieces after it.
      std::lock_guard<std::mutex> lock(mutex_);
      --tasks_;
      changed_.notify_all();
    });
  }
}

void OutputEngine::run_output(Piece& piece, size_t output) noexcept {
  const auto start = Clock::now();
  bool failed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    failed = error_ != nullptr;
  }
  int64_t bytes = 0;
  if (!failed) {
    try {
      bytes = sinks_[output]->make_run(run_of(piece, output), piece.first, piece.count, piece.records[output],
                                       options_.threads);
    } catch (...) {
      fail(std::current_exception());
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    write_seconds_ += seconds_since(start);
  }
  place_in_order(piece, output, bytes);
}

void OutputEngine::place_in_order(Piece& piece, size_t output, int64_t bytes) noexcept {
  const std::pair<size_t, int64_t> key{output, piece.file[output]};
  std::unique_lock<std::mutex> lock(mutex_);
  FileOrder* order = &orders_.find(key)->second;
  const size_t ring = order->made.size();
  piece.bytes[output] = bytes;
  order->made[piece.order[output] % ring] = &piece;
  ++order->waiting;
  for (Piece* next = order->made[order->next % ring]; next != nullptr && next->order[output] == order->next;
       next = order->made[order->next % ring]) {
    order->made[order->next % ring] = nullptr;
    --order->waiting;
    next->start[output] = order->end;
    order->end += next->bytes[output];
    order->placed_images += next->count;
    ++order->next;
    next->placed_next[output] = nullptr;
    *order->to_write_end = next;
    order->to_write_end = &next->placed_next[output];
  }
  if (order->writing) return;  // the task writing this file writes these too
  // This task writes the file's placed pieces, in order, until none is left.
  order->writing = true;
  while (order->to_write != nullptr) {
    Piece* list = order->to_write;
    order->to_write = nullptr;
    order->to_write_end = &order->to_write;
    lock.unlock();
    for (Piece* p = list; p != nullptr;) {
      Piece* next = p->placed_next[output];  // read before the piece is written and given back
      write_placed(*p, output, p->start[output]);
      p = next;
    }
    lock.lock();
    order = &orders_.find(key)->second;
  }
  order->writing = false;
  if (order->waiting == 0 && order->next == order->assigned &&
      order->placed_images >= sinks_[output]->write_file_images(key.second)) {
    orders_.erase(key);  // the file is complete
  }
}

void OutputEngine::write_placed(Piece& piece, size_t output, int64_t start) noexcept {
  const auto begin = Clock::now();
  bool failed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    failed = error_ != nullptr;
  }
  if (!failed) {
    try {
      sinks_[output]->write_run(run_of(piece, output), piece.first, piece.count, piece.records[output], start,
                                options_.threads);
    } catch (...) {
      fail(std::current_exception());
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    write_seconds_ += seconds_since(begin);
  }
  output_done(piece);
}

void OutputEngine::output_done(Piece& piece) noexcept {
  if (piece.outputs_left.fetch_sub(1) != 1) return;
  bool failed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    failed = error_ != nullptr;
  }
  if (!failed && options_.on_written) {
    try {
      options_.on_written(piece.first, piece.count);
    } catch (...) {
      fail(std::current_exception());
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  free_.push_back(&piece);
  --in_flight_;
  changed_.notify_all();
}

void OutputEngine::finish() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return in_flight_ == 0 && tasks_ == 0; });
  rethrow_if_failed();
}

double OutputEngine::write_seconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return write_seconds_;
}

double OutputEngine::wait_seconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return wait_seconds_;
}

}  // namespace facegen
