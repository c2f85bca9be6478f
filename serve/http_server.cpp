// http_server.cpp: see http_server.hpp. Loop 0 accepts; each accepted connection goes to the next
// loop in turn and lives there until it ends (http_connection.hpp).
#include "serve/http_server.hpp"

#include <sys/resource.h>

#include <thread>
#include <vector>

#include "common/errors.hpp"
#include "serve/http_connection.hpp"

namespace facegen::serve {

struct HttpServer::Impl {
  ServerShared shared;
  std::vector<std::unique_ptr<EventLoop>> loops;
  asio::ip::tcp::acceptor acceptor;
  asio::steady_timer accept_pause;  // after the process ran out of open files
  size_t next_loop = 0;
  std::atomic<bool> stop_asked{false};

  Impl(const ServerOptions& options, const Routes& routes, Metrics& metrics, RequestThreads& threads)
      : shared{options, routes, metrics, threads, MemoryBudget(options.body_memory_bytes)},
        loops(make_loops(options.io_threads)),
        acceptor(loops.front()->context),
        accept_pause(loops.front()->context) {}

  static std::vector<std::unique_ptr<EventLoop>> make_loops(int count) {
    std::vector<std::unique_ptr<EventLoop>> made;
    for (int k = 0; k < std::max(1, count); ++k) made.push_back(std::make_unique<EventLoop>());
    return made;
  }

  void listen() {
    const ServerOptions& options = shared.options;
    std::error_code error;
    asio::ip::tcp::resolver resolver(loops.front()->context);
    const auto endpoints = resolver.resolve(options.host, std::to_string(options.port),
                                            asio::ip::resolver_base::passive | asio::ip::resolver_base::numeric_service, error);
    if (!error && !endpoints.empty()) {
      const asio::ip::tcp::endpoint endpoint = *endpoints.begin();
      acceptor.open(endpoint.protocol(), error);
      // SO_REUSEADDR alone (no SO_REUSEPORT): a second server on the port is told it is taken.
      if (!error) acceptor.set_option(asio::socket_base::reuse_address(true), error);
      if (!error) acceptor.bind(endpoint, error);
      if (!error) acceptor.listen(asio::socket_base::max_listen_connections, error);
    }
    if (error || endpoints.empty()) {
      throw UserError("cannot listen on " + options.host + ":" + std::to_string(options.port) +
                      " (the port is taken, or the address is not one of this machine's)");
    }
  }

  void accept() {
    const size_t index = next_loop;
    next_loop = (next_loop + 1) % loops.size();
    acceptor.async_accept(loops[index]->context, [this, index](const std::error_code& error, asio::ip::tcp::socket socket) {
      on_accept(error, std::move(socket), *loops[index]);
    });
  }

  void on_accept(const std::error_code& error, asio::ip::tcp::socket socket, EventLoop& loop) {
    if (stop_asked || !acceptor.is_open()) return;
    if (error == asio::error::no_descriptors || error == asio::error::no_buffer_space || error == asio::error::no_memory) {
      accept_pause.expires_after(std::chrono::milliseconds(50));  // accept again when a connection has ended
      accept_pause.async_wait([this](const std::error_code& waited) { if (!waited) accept(); });
      return;
    }
    if (!error) place(std::move(socket), loop);
    accept();
  }

  // The connection to its loop: served, or (past the limit) answered 503 at once.
  void place(asio::ip::tcp::socket socket, EventLoop& loop) {
    Metrics& metrics = shared.metrics;
    if (metrics.connections_open() < shared.options.max_connections) {
      metrics.connection_opened();
      asio::post(loop.context, [this, &loop, socket = std::move(socket)]() mutable {
        std::make_shared<Connection>(shared, loop, std::move(socket))->serve();
      });
      return;
    }
    metrics.connection_refused();
    if (shared.refusing.fetch_add(1) >= kMaxRefusingConnections) {
      --shared.refusing;
      std::error_code ignored;
      socket.non_blocking(true, ignored);
      const std::string answer = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\nConnection: close\r\n\r\n";
      socket.write_some(asio::buffer(answer), ignored);
      socket.close(ignored);
      return;
    }
    asio::post(loop.context, [this, &loop, socket = std::move(socket)]() mutable {
      std::make_shared<Connection>(shared, loop, std::move(socket))->refuse_full();
    });
  }

  // On each loop: the idle connections end, and the loop ends once its others have.
  void stop_loops() {
    asio::post(loops.front()->context, [this] {
      std::error_code ignored;
      acceptor.close(ignored);
      accept_pause.cancel();
    });
    for (auto& owned : loops) {
      EventLoop* loop = owned.get();
      asio::post(loop->context, [loop] {
        std::vector<std::shared_ptr<Connection>> held;
        for (Connection* connection : loop->connections) held.push_back(connection->shared_from_this());
        for (const auto& connection : held) connection->end_if_idle();
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

int HttpServer::port() const { return impl_->acceptor.local_endpoint().port(); }

void HttpServer::run() {
  if (!impl_->stop_asked) impl_->accept();
  std::vector<std::thread> threads;
  for (size_t k = 1; k < impl_->loops.size(); ++k) threads.emplace_back([loop = impl_->loops[k].get()] { loop->context.run(); });
  impl_->loops.front()->context.run();
  for (std::thread& thread : threads) thread.join();
}

void HttpServer::stop() {
  if (impl_->stop_asked.exchange(true)) return;
  impl_->shared.stopping = true;
  impl_->stop_loops();
}

}  // namespace facegen::serve
