// http_server: HTTP/1.1 over standalone-Asio TCP sockets, one coroutine per connection
// (co_spawn ... detached), Boost.Beast's sans-I/O parser and serializer for the wire format.
// Keep-alive, limits on header size / body size / idle and slow clients (http_types.hpp).
//
// Threads: everything runs on the io_context given to the constructor; run it on one thread or
// several (connections are independent; one connection's coroutines never run concurrently
// because each connection is serialised by its own strand).
#pragma once

#include <asio/awaitable.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"
#include "http/http_types.hpp"

namespace coserve::http {

class connection;

// Handed to a handler for the one request it answers. Arguments must outlive the co_await (pass
// named locals, never temporaries: GCC 12 mis-destroys temporaries of a co_await expression).
// Exactly one of: send(), or begin_stream() followed by write_chunk()* and end_stream(). Every
// awaitable resumes on the connection's strand.
class response_writer {
 public:
  explicit response_writer(connection& c) noexcept : conn_(c) {}

  // A complete response (Content-Length). false: the client is gone.
  asio::awaitable<bool> send(const http_response& r);
  // Status line and headers of a chunked response (SSE: text/event-stream).
  asio::awaitable<bool> begin_stream(int status, std::string_view content_type);
  // One chunk, written at once (no buffering). false: the client is gone or too slow.
  asio::awaitable<bool> write_chunk(std::string_view data);
  // The terminating chunk.
  asio::awaitable<bool> end_stream();
  // A header every response to this request carries (complete or streamed), such as CORS's.
  void add_header(std::string name, std::string value);
  // Completes when the client closes its side or the connection fails; returns false when it was
  // cancelled instead (the `||` of awaitable_operators cancels it once the response is done).
  // Bytes a pipelining client sends meanwhile are kept for the next request.
  asio::awaitable<bool> wait_disconnect();

  bool client_gone() const noexcept;

 private:
  connection& conn_;
};

using request_handler = std::function<asio::awaitable<void>(http_request&, response_writer&)>;

class http_server {
 public:
  http_server(asio::io_context& io, server_limits limits, request_handler handler);
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  // Binds and starts accepting; returns the bound port (port 0 picks a free one).
  result<uint16_t> listen(const std::string& host, uint16_t port);

  // Stops accepting and closes idle keep-alive connections; connections busy with a request finish
  // it and then close. Any thread.
  void stop();

  // Requests being handled right now (between a parsed request and its last byte written).
  int64_t active_requests() const noexcept {
    return active_requests_.load(std::memory_order_relaxed);
  }
  int64_t open_connections() const noexcept {
    return open_connections_.load(std::memory_order_relaxed);
  }

 private:
  friend class connection;
  asio::awaitable<void> accept_loop();
  void forget(connection* c);

  asio::io_context& io_;
  server_limits limits_;
  request_handler handler_;
  asio::ip::tcp::acceptor acceptor_;
  // Counters read by other threads (metrics, shutdown): relaxed, they order nothing.
  std::atomic<int64_t> active_requests_{0};
  std::atomic<int64_t> open_connections_{0};
  std::atomic<bool> stopping_{false};
  std::mutex conns_mu_;  // guards conns_ (touched from connection strands and stop())
  std::vector<std::weak_ptr<connection>> conns_;
};

// Shortest status text for the status line.
std::string_view status_reason(int status) noexcept;

}  // namespace coserve::http
