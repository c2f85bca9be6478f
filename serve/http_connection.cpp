// http_connection.cpp: see http_connection.hpp.
#include "serve/http_connection.hpp"

#include <array>
#include <chrono>

namespace facegen::serve {
namespace {

constexpr int kLingerSeconds = 2;
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
  arm(Deadline::Idle, shared_.options.idle_timeout_s);
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

void Connection::end_if_idle() {
  if (phase_ == Phase::Reading && !reader_.begun() && pending_.empty()) close();
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
  if (!begun && reader_.begun()) arm(Deadline::Head, shared_.options.io_timeout_s);
  switch (reader_.state()) {
    case RequestReader::State::Refused:
      return write(shared_.routes.refusal(reader_.refusal()));
    case RequestReader::State::Complete:
      pending_.assign(data + used, size - used);
      return dispatch(reader_.take());
    case RequestReader::State::Body:
      if (before == RequestReader::State::Head) arm(Deadline::Body, shared_.options.io_timeout_s);
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
  arm(Deadline::None, 0);
  version_ = request.version;
  keep_alive_ = request.keep_alive;
  head_only_ = request.method == "HEAD";
  if (!shared_.routes.slow(request)) return write(shared_.routes.answer(request));
  auto held = std::make_shared<HttpRequest>(std::move(request));
  auto work = asio::make_work_guard(loop_.context);  // the loop runs until the answer is back
  shared_.request_threads.post([self = shared_from_this(), held, work]() mutable {
    HttpResponse response = self->shared_.routes.answer(*held);
    held.reset();  // the body's memory back before the answer is written
    asio::post(self->loop_.context, [self, response = std::move(response)]() mutable { self->write(std::move(response)); });
    work.reset();
  });
}

void Connection::write(HttpResponse response) {
  if (phase_ == Phase::Closed) return;
  close_after_ = response.close || !keep_alive_ || shared_.stopping;
  out_head_ = interim_ + response_head(response, version_, !close_after_);
  interim_.clear();
  out_body_ = head_only_ ? std::string() : std::move(response.body);
  written_ = 0;
  phase_ = Phase::Writing;
  arm(Deadline::Write, shared_.options.io_timeout_s);
  write_more();
}

void Connection::write_more() {
  std::array<asio::const_buffer, 2> buffers;
  if (written_ < out_head_.size()) {
    buffers = {asio::buffer(out_head_.data() + written_, out_head_.size() - written_), asio::buffer(out_body_)};
  } else {
    const size_t done = written_ - out_head_.size();
    buffers = {asio::buffer(out_body_.data() + done, out_body_.size() - done), asio::const_buffer()};
  }
  socket_.async_write_some(buffers, [self = shared_from_this()](const std::error_code& error, size_t bytes) {
    if (self->phase_ != Phase::Writing) return;
    if (error) return self->close();  // the client went away
    self->written_ += bytes;
    if (self->written_ == self->out_head_.size() + self->out_body_.size()) return self->after_write();
    self->arm(Deadline::Write, self->shared_.options.io_timeout_s);  // it took some: its time starts again
    self->write_more();
  });
}

void Connection::after_write() {
  out_head_ = std::string();
  out_body_ = std::string();
  if (close_after_ || shared_.stopping) return linger();  // stopping: a kept-alive connection ends here
  phase_ = Phase::Reading;
  if (!pending_.empty()) {
    const std::string bytes = std::move(pending_);
    pending_.clear();
    take_bytes(bytes.data(), bytes.size());
    if (phase_ != Phase::Reading) return;
  }
  if (peer_closed_) return end_of_input();
  if (!reader_.begun()) arm(Deadline::Idle, shared_.options.idle_timeout_s);
  wait_readable();
}

// The answer closes the connection: stop sending (the client reads the end of the answer), and
// drop what the client still sends for a while, so that closing does not reset the connection and
// lose the answer on its way.
void Connection::linger() {
  phase_ = Phase::Lingering;
  std::error_code ignored;
  socket_.shutdown(asio::socket_base::shutdown_send, ignored);
  arm(Deadline::Linger, kLingerSeconds);
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
  arm(Deadline::None, 0);
  std::error_code ignored;
  socket_.close(ignored);
  loop_.connections.erase(this);
  if (served_) shared_.metrics.connection_closed();
  else --shared_.refusing;
}

void Connection::arm(Deadline deadline, int seconds) {
  deadline_ = deadline;
  ++deadline_generation_;
  if (deadline == Deadline::None) {
    timer_.cancel();
    return;
  }
  timer_.expires_after(std::chrono::seconds(seconds));
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
    case Deadline::Linger:
      return close();
    case Deadline::None:
      return;
  }
}

}  // namespace facegen::serve
