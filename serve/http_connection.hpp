// http_connection.hpp: one client connection on an event loop (http_server.hpp): its requests read as
// bytes arrive, handed to the routes, answered in order, and its deadlines. Every member is touched on
// its loop's thread only; the request threads and the batcher's workers hand answers back through the
// loop (an answer made later, HttpResponse::later, comes back so too).
//
//   Reading  --request whole--> Working --answer made--> Writing --written--> Reading (keep-alive;
//   |  the bytes that came after a request are the next one's, read before the socket again) or
//   |  Lingering (the answer closes the connection: stop sending, drop what comes for up to 2 s) --> Closed
//   deadlines: Reading with no request begun: idle_timeout_s (then closed); a request's head, from its
//   first byte, and its body, from the end of its head: io_timeout_s (then 400); Writing: io_timeout_s
//   without a byte taken (then closed). Working has none: that time is the service's.
//
// An answer is written as its head, its body and its body's slices (a batch's images where they lie)
// together, by gathering writes; the slices' memory is held until written. An answer that holds slices
// and is not all taken within kHoldSliceMs (a slow reader) has what is left copied into the
// connection, and the slices let go, so a slow client never holds a batch's memory for long.
//
// When the server stops (stop()): an idle connection closes at once; one whose request has begun but
// is not whole is answered 503 and closed at once, not waited for; one whose request is being
// answered closes after its answer (Connection: close), a slow reader taking it at its own pace.
#pragma once

// The standard library's headers before Asio's: Asio chooses between aligned_alloc and operator new
// for its handlers by a macro those headers define, and every file must choose alike (a file that
// included Asio first freed with operator delete what another allocated with aligned_alloc).
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include <asio.hpp>

#include "serve/http_parse.hpp"
#include "serve/http_server.hpp"

namespace facegen::serve {

class Connection;

// What every connection of a server shares, touched from every loop: references, constants, atomics.
struct ServerShared {
  const ServerOptions& options;
  const Routes& routes;
  Metrics& metrics;
  RequestThreads& request_threads;
  MemoryBudget body_budget;
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> refusing{0};  // connections past the limit being told 503
};

// One event loop: its context, a read buffer its connections share (one handler runs at a time, and
// each reads and consumes its bytes at once), and the connections it holds.
struct EventLoop {
  asio::io_context context{1};
  asio::executor_work_guard<asio::io_context::executor_type> keep_running = asio::make_work_guard(context);
  std::vector<char> scratch = std::vector<char>(64 << 10);
  std::unordered_set<Connection*> connections;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(ServerShared& shared, EventLoop& loop, asio::ip::tcp::socket socket);
  ~Connection();
  // Reads requests and answers them until the connection ends. The connection was counted open.
  void serve();
  // Answers 503 at once (past max_connections) and closes; the connection was counted refusing.
  void refuse_full();
  // The server is stopping: an idle connection ends now, one in the middle of reading a request is
  // answered 503 and ends now, one being answered ends after its answer.
  void stop();

 private:
  enum class Phase { Reading, Working, Writing, Lingering, Closed };
  enum class Deadline { None, Idle, Head, Body, Write, Release, Linger };

  void wait_readable();
  void on_readable(const std::error_code& error);
  void end_of_input();
  void take_bytes(const char* data, size_t size);
  void send_continue();
  void dispatch(HttpRequest request);
  HttpReply reply_on_loop();
  void respond(HttpResponse response);
  void write(HttpResponse response);
  void write_more();
  void after_write();
  void copy_out_slices();
  void linger();
  void linger_read();
  void close();
  void arm(Deadline deadline, std::chrono::steady_clock::duration after);
  void arm_seconds(Deadline deadline, int seconds) { arm(deadline, std::chrono::seconds(seconds)); }
  void on_deadline(Deadline deadline, unsigned generation);

  ServerShared& shared_;
  EventLoop& loop_;
  asio::ip::tcp::socket socket_;
  asio::steady_timer timer_;
  RequestReader reader_;
  Phase phase_ = Phase::Reading;
  Deadline deadline_ = Deadline::None;
  unsigned deadline_generation_ = 0;
  bool served_ = true;       // counted open (false: a refused connection)
  bool peer_closed_ = false; // the client has closed its side
  std::string pending_;      // bytes read after the request being answered: the next request's
  int version_ = 11;         // of the request being answered
  bool keep_alive_ = true;
  bool head_only_ = false;   // HEAD: the answer's head alone
  bool close_after_ = false;
  bool stopped_ = false;     // answered 503 by stop(): closed at once after it, no lingering
  std::string interim_;      // the part of "100 Continue" not yet sent, sent before the answer
  // The answer being written: parts_ over out_head_, out_body_ and the body's slices (held by
  // holds_); after copy_out_slices(), over out_rest_, the bytes from rest_from_ on.
  std::string out_head_, out_body_, out_rest_;
  std::vector<asio::const_buffer> parts_;
  std::vector<std::shared_ptr<const void>> holds_;
  std::vector<std::shared_ptr<const void>> retired_holds_;  // until the write in progress is done
  size_t out_bytes_ = 0, written_ = 0, rest_from_ = 0;
  size_t lingered_ = 0;      // bytes dropped while lingering
};

}  // namespace facegen::serve
