// output_stage.cpp: the writer thread and its bounded pool of image buffers (see output_stage.hpp).
#include "run/output_stage.hpp"

#include <chrono>
#include <stdexcept>
#include <utility>

#include "common/clock.hpp"
#include "common/model_shape.hpp"

namespace facegen {
OutputStage::OutputStage(std::vector<std::unique_ptr<ImageSink>> sinks, int64_t chunk_images, int buffers,
                         std::function<void(int64_t)> on_written, int64_t image_values, ImageEncoding encoding)
    : sinks_(std::move(sinks)), on_written_(std::move(on_written)), encoding_(encoding),
      channels_(static_cast<int>(image_values / 4096)) {
  if (chunk_images < 1 || buffers < 1) throw std::invalid_argument("OutputStage: empty chunk or no buffers");
  for (int b = 0; b < buffers; ++b) {
    // new[] without initialisation: a buffer's pages become resident as images land in it.
    storage_.emplace_back(new char[static_cast<size_t>(chunk_images * image_bytes(encoding, channels_))]);
    free_.push_back(storage_.back().get());
  }
  writer_ = std::thread(&OutputStage::writer_loop, this);
}

OutputStage::~OutputStage() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    queue_.clear();
  }
  changed_.notify_all();
  if (writer_.joinable()) writer_.join();
}

void OutputStage::rethrow_if_failed() {
  if (error_) std::rethrow_exception(error_);
}

void* OutputStage::acquire() {
  const auto start = Clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !free_.empty() || error_; });
  rethrow_if_failed();
  void* buffer = free_.back();
  free_.pop_back();
  wait_seconds_ += seconds_since(start);
  return buffer;
}

void OutputStage::submit(void* buffer, int64_t first, int64_t count) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    rethrow_if_failed();
    queue_.push_back(Job{buffer, first, count});
  }
  changed_.notify_all();
}

void OutputStage::finish() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return (queue_.empty() && free_.size() == storage_.size()) || error_; });
    rethrow_if_failed();
  }
  const auto start = Clock::now();
  std::vector<ImageSink*> all;
  for (auto& sink : sinks_) all.push_back(sink.get());
  commit_sinks(all);  // every byte of every output on disk, then all renamed or none
  std::lock_guard<std::mutex> lock(mutex_);
  write_seconds_ += seconds_since(start);
}

double OutputStage::write_seconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return write_seconds_;
}

void OutputStage::writer_loop() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return !queue_.empty() || stopping_; });
      if (stopping_) return;
      job = queue_.front();
      queue_.pop_front();
    }
    const auto start = Clock::now();
    std::exception_ptr error;
    try {
      const ImageRun images{encoding_, job.buffer, channels_};
      for (auto& sink : sinks_) sink->append(images, job.first, job.count);
    } catch (...) {
      error = std::current_exception();
    }
    // Before the buffer is released, so that finish() returns only after the last report.
    if (!error && on_written_) on_written_(job.first + job.count);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      write_seconds_ += seconds_since(start);
      free_.push_back(job.buffer);
      if (error && !error_) error_ = error;
    }
    changed_.notify_all();
    if (error) return;  // the generating thread rethrows it; nothing more is written
  }
}

}  // namespace facegen
