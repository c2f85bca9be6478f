// http_connection.cpp: see http_connection.hpp.
#include "serve/http_connection.hpp"

#include <array>
#include <chrono>

namespace facegen::serve {
namespace {

constexpr int kLingerSeconds = 2;
// An answer holding a batch's memory (slices) that is not all taken within this is copied out of it:
// 12 MB of images leave a client reading at 1 GB/s in 12 ms.
constexpr auto kHoldSliceMs = std::chrono::milliseconds(20);
constexpr int kStopWriteSeconds = 1;  // for the 503 of a request cut short by a stop
constexpr size_t kWriteBuffers = 16;  // buffers a gathering write takes at once
constexpr size_t kMaxLingerBytes = size_t{1} << 20;  // dropped while lingering, then closed
constexpr int kReadsPerTurn = 16;  // reads of a busy connection before the loop serves the others
constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";

bool would_block(const std::error_code& error) {
  return error == asio::error::would_block || error == asio::error::try_again;
}

}  // namespace

Connection::Connection(ServerShared& shared, EventLoop& loop, asio::ip::tcp::socket socket)
    : shared_(shared), loop_(loop), socket_(std::move(socket)), timer_(loop.context),
      reader_(shared.options.limits, shared.body_budget) {
  std::error_code ignored;
  socket_.non_blocking(true, ignored);
  // An answer is written in one go, head and body together; without this a small answer could wait
  // for the client's delayed ACK of the one before (40 ms).
  socket_.set_option(asio::ip::tcp::no_delay(true), ignored);
  loop_.connections.insert(this);
}

Connection::~Connection() = default;

void Connection::serve() {
  arm_seconds(Deadline::Idle, shared_.options.idle_timeout_s);
  wait_readable();
}

void Connection::refuse_full() {
  served_ = false;
  HttpResponse response;
  response.set(503, "application/json", error_json("the service holds the " + std::to_string(shared_.options.max_connections) +
                                                   " connections of its --max-connections; retry shortly"));
  response.fields.push_back({"Retry-After", "1"});
  response.close = true;
  write(std::move(response));
}

void Connection::stop() {
  if (phase_ != Phase::Reading) return;  // being answered (closes after it), lingering, or closed
  if (!reader_.begun() && pending_.empty()) return close();
  std::error_code ignored;
  socket_.cancel(ignored);  // the wait for the rest of the request ends (aborted)
  stopped_ = true;
  version_ = 11;
  keep_alive_ = false;
  head_only_ = false;
  write(shared_.routes.refusal({503, "the service is stopping; this request did not arrive whole before it stopped"}));
}

void Connection::wait_readable() {
  socket_.async_wait(asio::socket_base::wait_read, [self = shared_from_this()](const std::error_code& error) {
    self->on_readable(error);
  });
}

// Reads what the socket holds (a few times, then lets the loop serve others) and feeds it to the
// request being read, until it is whole or refused.
void Connection::on_readable(const std::error_code& error) {
  if (phase_ != Phase::Reading) return;  // a deadline or a stop came first
  if (error) return close();
  for (int turn = 0; turn < kReadsPerTurn && phase_ == Phase::Reading; ++turn) {
    std::error_code read_error;
    const size_t bytes = socket_.read_some(asio::buffer(loop_.scratch), read_error);
    if (would_block(read_error)) break;
    if (read_error == asio::error::eof) return end_of_input();
    if (read_error) return close();
    take_bytes(loop_.scratch.data(), bytes);
  }
  if (phase_ == Phase::Reading) wait_readable();
}

// The client closed its side: what it sent before is answered (a half-closed client still reads),
// a request it left unfinished is refused, and with nothing begun the connection ends.
void Connection::end_of_input() {
  peer_closed_ = true;
  reader_.end_of_input();
  if (reader_.state() == RequestReader::State::Refused) return write(shared_.routes.refusal(reader_.refusal()));
  close();
}

void Connection::take_bytes(const char* data, size_t size) {
  const bool begun = reader_.begun();
  const RequestReader::State before = reader_.state();
  const size_t used = reader_.feed(data, size);
  if (!begun && reader_.begun()) arm_seconds(Deadline::Head, shared_.options.io_timeout_s);
  switch (reader_.state()) {
    case RequestReader::State::Refused:
      return write(shared_.routes.refusal(reader_.refusal()));
    case RequestReader::State::Complete:
      pending_.assign(data + used, size - used);
      return dispatch(reader_.take());
    case RequestReader::State::Body:
      if (before == RequestReader::State::Head) arm_seconds(Deadline::Body, shared_.options.io_timeout_s);
      if (reader_.wants_continue()) send_continue();
      return;
    case RequestReader::State::Head:
      return;
  }
}

// "100 Continue" before the body the client holds back for it: written at once (it is tiny and the
// socket idle); a part the socket did not take goes before the answer, where the client expects it.
void Connection::send_continue() {
  reader_.continue_sent();
  std::error_code error;
  const size_t sent = socket_.write_some(asio::buffer(kContinue, sizeof kContinue - 1), error);
  interim_.assign(kContinue + (error ? 0 : sent), sizeof kContinue - 1 - (error ? 0 : sent));
}

void Connection::dispatch(HttpRequest request) {
  phase_ = Phase::Working;
  arm(Deadline::None, {});
  version_ = request.version;
  keep_alive_ = request.keep_alive;
  head_only_ = request.method == "HEAD";
  if (!shared_.routes.slow(request)) return respond(shared_.routes.answer(request));
  auto held = std::make_shared<HttpRequest>(std::move(request));
  shared_.request_threads.post([self = shared_from_this(), held, reply = reply_on_loop()]() mutable {
    HttpResponse response = self->shared_.routes.answer(*held);
    held.reset();  // the body's memory back before the answer is written
    if (response.later) return response.later(std::move(reply));  // it waits for images: on no thread
    reply(std::move(response));
  });
}

// Brings an answer made on another thread back to this loop; the loop runs until it is back.
HttpReply Connection::reply_on_loop() {
  return [self = shared_from_this(), work = asio::make_work_guard(loop_.context)](HttpResponse response) {
    asio::post(self->loop_.context, [self, response = std::move(response)]() mutable { self->respond(std::move(response)); });
  };
}

// On the loop: the answer written, or, for one made later, the making begun (it comes back here).
void Connection::respond(HttpResponse response) {
  if (!response.later) return write(std::move(response));
  const auto later = std::move(response.later);
  later(reply_on_loop());
}

void Connection::write(HttpResponse response) {
  if (phase_ == Phase::Closed) return;
  close_after_ = response.close || !keep_alive_ || shared_.stopping;
  out_head_ = interim_ + response_head(response, version_, !close_after_);
  interim_.clear();
  parts_.clear();
  parts_.push_back(asio::buffer(out_head_));
  if (!head_only_) {
    out_body_ = std::move(response.body);
    if (!out_body_.empty()) parts_.push_back(asio::buffer(out_body_));
    for (const BodySlice& slice : response.slices) {
      if (slice.size > 0) parts_.push_back(asio::buffer(slice.data, slice.size));
    }
    holds_ = std::move(response.holds);
  }
  out_bytes_ = 0;
  for (const asio::const_buffer& part : parts_) out_bytes_ += part.size();
  written_ = rest_from_ = 0;
  phase_ = Phase::Writing;
  if (stopped_) arm_seconds(Deadline::Write, kStopWriteSeconds);
  else if (holds_.empty()) arm_seconds(Deadline::Write, shared_.options.io_timeout_s);
  else arm(Deadline::Release, kHoldSliceMs);
  write_more();
}

// The parts not yet written, a gathering write at a time.
void Connection::write_more() {
  std::array<asio::const_buffer, kWriteBuffers> buffers;
  size_t count = 0, skip = written_ - rest_from_;
  for (const asio::const_buffer& part : parts_) {
    if (skip >= part.size()) {
      skip -= part.size();
      continue;
    }
    buffers[count++] = part + skip;
    skip = 0;
    if (count == buffers.size()) break;
  }
  socket_.async_write_some(buffers, [self = shared_from_this()](const std::error_code& error, size_t bytes) {
    self->retired_holds_.clear();  // the write that read them is done
    if (self->phase_ != Phase::Writing) return;
    if (error) return self->close();  // the client went away
    self->written_ += bytes;
    if (self->written_ == self->out_bytes_) return self->after_write();
    // It took some: its time starts again (while slices are held, their deadline comes first).
    if (self->holds_.empty()) self->arm_seconds(Deadline::Write, self->shared_.options.io_timeout_s);
    self->write_more();
  });
}

// The answer's unwritten bytes into the connection's own string, the slices let go (kHoldSliceMs).
// The write in progress may still read the old parts: what holds them stays until it is done.
void Connection::copy_out_slices() {
  out_rest_.clear();
  out_rest_.reserve(out_bytes_ - written_);
  size_t skip = written_ - rest_from_;
  for (const asio::const_buffer& part : parts_) {
    if (skip >= part.size()) {
      skip -= part.size();
      continue;
    }
    out_rest_.append(static_cast<const char*>(part.data()) + skip, part.size() - skip);
    skip = 0;
  }
  rest_from_ = written_;
  parts_.assign(1, asio::buffer(out_rest_));
  retired_holds_ = std::move(holds_);
  holds_.clear();
  arm_seconds(Deadline::Write, stopped_ ? kStopWriteSeconds : shared_.options.io_timeout_s);
}

void Connection::after_write() {
  out_head_ = std::string();
  out_body_ = std::string();
  out_rest_ = std::string();
  parts_.clear();
  holds_.clear();
  if (stopped_) return close();  // a request cut short by the stop: not lingered over
  if (close_after_ || shared_.stopping) return linger();  // stopping: a kept-alive connection ends here
  phase_ = Phase::Reading;
  if (!pending_.empty()) {
    const std::string bytes = std::move(pending_);
    pending_.clear();
    take_bytes(bytes.data(), bytes.size());
    if (phase_ != Phase::Reading) return;
  }
  if (peer_closed_) return end_of_input();
  if (!reader_.begun()) arm_seconds(Deadline::Idle, shared_.options.idle_timeout_s);
  wait_readable();
}

// The answer closes the connection: stop sending (the client reads the end of the answer), and
// drop what the client still sends for a while, so that closing does not reset the connection and
// lose the answer on its way.
void Connection::linger() {
  phase_ = Phase::Lingering;
  std::error_code ignored;
  socket_.shutdown(asio::socket_base::shutdown_send, ignored);
  arm_seconds(Deadline::Linger, kLingerSeconds);
  socket_.async_wait(asio::socket_base::wait_read, [self = shared_from_this()](const std::error_code& error) {
    if (self->phase_ != Phase::Lingering) return;
    if (error) return self->close();
    self->linger_read();
  });
}

void Connection::linger_read() {
  while (true) {
    std::error_code error;
    const size_t bytes = socket_.read_some(asio::buffer(loop_.scratch), error);
    if (would_block(error)) break;
    lingered_ += bytes;
    if (error || lingered_ > kMaxLingerBytes) return close();
  }
  socket_.async_wait(asio::socket_base::wait_read, [self = shared_from_this()](const std::error_code& error) {
    if (self->phase_ != Phase::Lingering) return;
    if (error) return self->close();
    self->linger_read();
  });
}

void Connection::close() {
  if (phase_ == Phase::Closed) return;
  phase_ = Phase::Closed;
  arm(Deadline::None, {});
  std::error_code ignored;
  socket_.close(ignored);
  loop_.connections.erase(this);
  if (served_) shared_.metrics.connection_closed();
  else --shared_.refusing;
}

void Connection::arm(Deadline deadline, std::chrono::steady_clock::duration after) {
  deadline_ = deadline;
  ++deadline_generation_;
  if (deadline == Deadline::None) {
    timer_.cancel();
    return;
  }
  timer_.expires_after(after);
  timer_.async_wait([self = shared_from_this(), deadline, generation = deadline_generation_](const std::error_code& error) {
    if (!error) self->on_deadline(deadline, generation);
  });
}

void Connection::on_deadline(Deadline deadline, unsigned generation) {
  if (generation != deadline_generation_ || phase_ == Phase::Closed) return;
  std::error_code ignored;
  switch (deadline) {
    case Deadline::Idle:
      shared_.metrics.connection_timed_out(TimeoutPhase::Idle);
      return close();
    case Deadline::Head:
    case Deadline::Body: {
      shared_.metrics.connection_timed_out(deadline == Deadline::Head ? TimeoutPhase::Head : TimeoutPhase::Body);
      socket_.cancel(ignored);  // the wait for bytes ends (aborted) and finds the connection writing
      const std::string part = deadline == Deadline::Head ? "head" : "body";
      version_ = 11;
      keep_alive_ = false;
      head_only_ = false;
      return write(shared_.routes.refusal({400, "the request did not arrive whole within the service's time limit (--io-timeout-s " +
                                                    std::to_string(shared_.options.io_timeout_s) + " s for its " + part + ")"}));
    }
    case Deadline::Write:
      shared_.metrics.connection_timed_out(TimeoutPhase::Write);
      return close();
    case Deadline::Release:
      return copy_out_slices();
    case Deadline::Linger:
      return close();
    case Deadline::None:
      return;
  }
}

}  // namespace facegen::serve
