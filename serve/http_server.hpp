// http_server.hpp: the service's HTTP/1.1 server: connections held by a few event loops (Asio, one
// thread each), requests read strictly (http_parse.hpp), answers from the routes (routes.hpp): the
// quick ones on the loop, those that take CPU (a large body, an answer to encode) on the request
// threads, those that wait for images on no thread at all (the batcher tells them), and every answer
// written back by its loop as fast as its client takes it, so no thread waits on a client, and a
// client that sends or reads slowly holds only its connection.
//
// Limits, each closing the connection when passed:
//   max_connections   held at once; past it a new connection is answered 503 at once and closed
//   idle_timeout_s    a connection with no request begun (new, or kept alive after an answer)
//   io_timeout_s      a request's head, from its first byte; its body, from the end of its head (each
//                     answered 400 "did not arrive whole"); an answer that the client takes none of
//   HttpLimits        the head's bytes and fields, the body's bytes (http_parse.hpp)
//   body_memory_bytes the request bodies held at once by every connection together (memory_budget.hpp)
// After an answer that closes the connection (a refusal, "Connection: close", a stop), the server
// stops sending, reads and drops what the client still sends for up to 2 s, then closes: closing with
// unread bytes would reset the connection and could lose the answer on its way.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "serve/http_parse.hpp"
#include "serve/metrics.hpp"
#include "serve/request_threads.hpp"
#include "serve/routes.hpp"

namespace facegen::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                 // 0: any free port (port() says which)
  int io_threads = 2;              // event loops
  int64_t max_connections = 10000;
  int io_timeout_s = 10;
  int idle_timeout_s = 5;
  HttpLimits limits;
  int64_t body_memory_bytes = int64_t{2} << 30;
};

// Connections past max_connections that may be in the middle of being told 503 at once; more are
// sent it without waiting and closed.
constexpr int64_t kMaxRefusingConnections = 256;
// Open files the process needs beside its connections (the listening socket, the loops, the model,
// MPI, a refused connection's 503).
constexpr int64_t kOpenFilesBesideConnections = kMaxRefusingConnections + 128;

// Raises this process's open-file limit (RLIMIT_NOFILE) toward `wanted`, as far as its hard limit
// allows; returns the limit it has after.
int64_t raise_open_file_limit(int64_t wanted);

class HttpServer {
 public:
  // Binds and listens; throws UserError where the address cannot be listened on.
  HttpServer(const ServerOptions& options, const Routes& routes, Metrics& metrics, RequestThreads& request_threads);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  // Serves until stop(); returns once every connection has ended, each request read answered.
  void run();
  // From any thread, at any time (before run() too): accept no more, end the idle connections, answer
  // 503 to those whose request is not whole and end them, and end the others after their answer.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace facegen::serve
