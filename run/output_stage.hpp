// output_stage.hpp: writing overlapped with generation, in bounded memory.
//
// The stage owns the sinks, a writer thread and a fixed number of image buffers, each
// (chunk_images, 64, 64, nc) floats, or (chunk_images, 64, 64, 3) bytes for 8-bit RGB images
// (image_run.hpp). The generating thread takes a free buffer (acquire), fills it and
// hands it over (submit); the writer thread appends it to every sink, in order, and frees it. With two
// buffers, chunk i is written while chunk i + 1 is computed; when the writer falls behind, acquire()
// waits, so memory never grows with N. A sink's error is rethrown on the generating thread at its next
// acquire(), submit() or finish().
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/model_shape.hpp"
#include "files/image_sink.hpp"

namespace facegen {

class OutputStage {
 public:
  // on_written(images_done) runs on the writer thread after each chunk reached every sink.
  // image_values: floats per image, 64 * 64 * nc; encoding: what the buffers hold.
  OutputStage(std::vector<std::unique_ptr<ImageSink>> sinks, int64_t chunk_images, int buffers,
              std::function<void(int64_t)> on_written, int64_t image_values = kImageValues,
              ImageEncoding encoding = ImageEncoding::Float32);
  ~OutputStage();  // stops the writer; uncommitted sinks leave no files
  OutputStage(const OutputStage&) = delete;
  OutputStage& operator=(const OutputStage&) = delete;

  void* acquire();  // a free buffer of chunk_images images; waits while every buffer is queued
  void submit(void* buffer, int64_t first, int64_t count);  // images [first, first + count) in buffer
  ImageEncoding encoding() const { return encoding_; }
  void finish();     // waits until everything is written, then commits every sink at once (commit_sinks)

  const std::vector<std::unique_ptr<ImageSink>>& sinks() const { return sinks_; }
  double write_seconds() const;  // time the writer spent in sinks, appends and commits
  double wait_seconds() const { return wait_seconds_; }  // time acquire() waited for the writer

 private:
  struct Job {
    void* buffer;
    int64_t first;
    int64_t count;
  };
  void writer_loop();
  void rethrow_if_failed();  // call with mutex_ held

  std::vector<std::unique_ptr<ImageSink>> sinks_;
  std::vector<std::unique_ptr<char[]>> storage_;
  std::function<void(int64_t)> on_written_;
  ImageEncoding encoding_;
  int channels_;  // nc

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<void*> free_;
  std::deque<Job> queue_;
  bool stopping_ = false;
  std::exception_ptr error_;
  double write_seconds_ = 0;
  double wait_seconds_ = 0;
  std::thread writer_;
};

}  // namespace facegen
