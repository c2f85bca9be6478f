// http_server.cpp: see http_server.hpp. Every loop accepts, and a connection lives on the loop that
// accepted it until it ends (http_connection.hpp).
#include "serve/http_server.hpp"

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>

#include <thread>
#include <vector>

#include "common/errors.hpp"
#include "serve/http_connection.hpp"

namespace facegen::serve {

// One listening socket, accepted from by every loop (each with an acceptor on its own copy of the
// socket): a connection lives on the loop that accepted it, which was free to, so no connection
// crosses threads and the loops share the connections by how busy they are.
struct LoopAcceptor {
  asio::ip::tcp::acceptor acceptor;
  asio::steady_timer pause;  // after the process ran out of open files
  explicit LoopAcceptor(EventLoop& loop) : acceptor(loop.context), pause(loop.context) {}
};

struct HttpServer::Impl {
  ServerShared shared;
  std::vector<std::unique_ptr<EventLoop>> loops;
  std::vector<std::unique_ptr<LoopAcceptor>> acceptors;  // one per loop
  std::atomic<bool> stop_asked{false};

  Impl(const ServerOptions& options, const Routes& routes, Metrics& metrics, RequestThreads& threads)
      : shared{options, routes, metrics, threads, MemoryBudget(options.body_memory_bytes)} {
    for (int k = 0; k < std::max(1, options.io_threads); ++k) {
      loops.push_back(std::make_unique<EventLoop>());
      acceptors.push_back(std::make_unique<LoopAcceptor>(*loops.back()));
    }
  }

  void listen() {
    const ServerOptions& options = shared.options;
    asio::ip::tcp::acceptor& first = acceptors.front()->acceptor;
    std::error_code error;
    asio::ip::tcp::resolver resolver(loops.front()->context);
    const auto endpoints = resolver.resolve(options.host, std::to_string(options.port),
                                            asio::ip::resolver_base::passive | asio::ip::resolver_base::numeric_service, error);
    const char* step = "resolving the address";  // what failed, with the system's own words for why
    if (!error && !endpoints.empty()) {
      const asio::ip::tcp::endpoint endpoint = *endpoints.begin();
      step = "socket";
      first.open(endpoint.protocol(), error);
      // SO_REUSEADDR alone (no SO_REUSEPORT): a second server on the port is told it is taken.
      if (!error) first.set_option(asio::socket_base::reuse_address(true), error);
      if (!error) step = "bind";
      if (!error) first.bind(endpoint, error);
      if (!error) step = "listen";
      if (!error) first.listen(asio::socket_base::max_listen_connections, error);
      for (size_t k = 1; k < acceptors.size() && !error; ++k) {
        const int copy = ::dup(first.native_handle());
        if (copy < 0) error = std::error_code(errno, std::system_category());
        else acceptors[k]->acceptor.assign(endpoint.protocol(), copy, error);
      }
    }
    if (error || endpoints.empty()) {
      throw UserError("cannot listen on " + options.host + ":" + std::to_string(options.port) + ": " + step + ": " +
                      (error ? error.message() : std::string("no address")));
    }
  }

  void accept(size_t index) {
    acceptors[index]->acceptor.async_accept([this, index](const std::error_code& error, asio::ip::tcp::socket socket) {
      on_accept(index, error, std::move(socket));
    });
  }

  void on_accept(size_t index, const std::error_code& error, asio::ip::tcp::socket socket) {
    LoopAcceptor& own = *acceptors[index];
    if (stop_asked || !own.acceptor.is_open()) return;
    if (error == asio::error::no_descriptors || error == asio::error::no_buffer_space || error == asio::error::no_memory) {
      own.pause.expires_after(std::chrono::milliseconds(50));  // accept again when a connection has ended
      own.pause.async_wait([this, index](const std::error_code& waited) { if (!waited) accept(index); });
      return;
    }
    if (!error) place(std::move(socket), *loops[index]);
    accept(index);
  }

  // The connection, on the loop that accepted it: served, or (past the limit) answered 503 at once.
  void place(asio::ip::tcp::socket socket, EventLoop& loop) {
    if (shared.metrics.connection_opened_within(shared.options.max_connections)) {
      std::make_shared<Connection>(shared, loop, std::move(socket))->serve();
      return;
    }
    shared.metrics.connection_refused();
    if (shared.refusing.fetch_add(1) >= kMaxRefusingConnections) {
      --shared.refusing;
      std::error_code ignored;
      socket.non_blocking(true, ignored);
      const std::string answer = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\nConnection: close\r\n\r\n";
      socket.write_some(asio::buffer(answer), ignored);
      socket.close(ignored);
      return;
    }
    std::make_shared<Connection>(shared, loop, std::move(socket))->refuse_full();
  }

  // On each loop: no more accepting, the idle connections end and those reading a request are answered
  // 503 (Connection::stop), and the loop ends once its others have.
  void stop_loops() {
    for (size_t k = 0; k < loops.size(); ++k) {
      EventLoop* loop = loops[k].get();
      LoopAcceptor* own = acceptors[k].get();
      asio::post(loop->context, [loop, own] {
        std::error_code ignored;
        own->acceptor.close(ignored);
        own->pause.cancel();
        std::vector<std::shared_ptr<Connection>> held;
        for (Connection* connection : loop->connections) held.push_back(connection->shared_from_this());
        for (const auto& connection : held) connection->stop();
        loop->keep_running.reset();
      });
    }
  }
};

int64_t raise_open_file_limit(int64_t wanted) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  if (static_cast<int64_t>(limit.rlim_cur) < wanted && limit.rlim_cur != RLIM_INFINITY) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max == RLIM_INFINITY ? static_cast<rlim_t>(wanted) : std::min<rlim_t>(limit.rlim_max, static_cast<rlim_t>(wanted));
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return limit.rlim_cur == RLIM_INFINITY ? INT64_MAX : static_cast<int64_t>(limit.rlim_cur);
}

HttpServer::HttpServer(const ServerOptions& options, const Routes& routes, Metrics& metrics, RequestThreads& request_threads)
    : impl_(std::make_unique<Impl>(options, routes, metrics, request_threads)) {
  impl_->listen();
}

HttpServer::~HttpServer() = default;

int HttpServer::port() const { return impl_->acceptors.front()->acceptor.local_endpoint().port(); }

void HttpServer::run() {
  for (size_t k = 0; k < impl_->acceptors.size() && !impl_->stop_asked; ++k) impl_->accept(k);
  std::vector<std::thread> threads;
  for (size_t k = 1; k < impl_->loops.size(); ++k) {
    threads.emplace_back([loop = impl_->loops[k].get()] {
      pthread_setname_np(pthread_self(), "facegen-io");  // for profilers: /proc/PID/task/*/comm
      loop->context.run();
    });
  }
  impl_->loops.front()->context.run();  // on the main thread, named facegen
  for (std::thread& thread : threads) thread.join();
}

void HttpServer::stop() {
  if (impl_->stop_asked.exchange(true)) return;
  impl_->shared.stopping = true;
  impl_->stop_loops();
}

}  // namespace facegen::serve
