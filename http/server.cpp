// The connection coroutine: read + parse (Beast sans-I/O parser) → handler → serialize (Beast
// serializer) → write, looping while the client keeps the connection alive.
//
// Only Beast's parser/serializer headers are included next to <asio.hpp>: Boost.Asio's I/O
// headers would collide with standalone Asio (see DESIGN.md).
#include "http/server.hpp"

#include <algorithm>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/awaitable_operators.hpp>
#include <asio/ip/address.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cctype>

#include "http/request_parser.hpp"

namespace coserve::http {

namespace bh = boost::beast::http;
using asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;
constexpr auto nothrow = asio::experimental::as_tuple(asio::use_awaitable);

std::string_view status_reason(int status) noexcept {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Payload Too Large";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Unknown";
  }
}

namespace {

// Serializes a Beast message (header only when `header_only`) into a string.
template <class Message>
std::string serialize(Message& msg, bool header_only) {
  bh::serializer<false, typename Message::body_type, typename Message::fields_type> sr(msg);
  sr.split(header_only);
  std::string out;
  boost::system::error_code ec;
  while (!(header_only ? sr.is_header_done() : sr.is_done())) {
    sr.next(ec, [&](boost::system::error_code&, const auto& buffers) {
      std::size_t n = 0;
      for (auto it = boost::asio::buffer_sequence_begin(buffers);
           it != boost::asio::buffer_sequence_end(buffers); ++it) {
        boost::asio::const_buffer b = *it;
        out.append(static_cast<const char*>(b.data()), b.size());
        n += b.size();
      }
      sr.consume(n);
    });
    if (ec) break;
  }
  return out;
}

std::string error_body(std::string_view message, std::string_view type, int status) {
  std::string b = R"({"error":{"message":")";
  b += message;  // callers pass plain ASCII without quotes
  b += R"(","type":")";
  b += type;
  b += R"(","param":null,"code":)";
  b += std::to_string(status);
  b += "}}";
  return b;
}

}  // namespace

// One client connection. Lives as long as its coroutine (shared_from_this keeps it).
class connection : public std::enable_shared_from_this<connection> {
 public:
  connection(http_server& server, tcp::socket socket)
      : server_(server), socket_(std::move(socket)), timer_(socket_.get_executor()) {}

  asio::awaitable<void> run() {
    auto self = shared_from_this();
    while (!server_.stopping_.load(std::memory_order_relaxed)) {
      http_request req;
      idle_ = true;
      int status = co_await read_request(req);
      idle_ = false;
      head_ = false;
      if (status < 0) break;  // closed, timed out or unusable: no response
      if (status > 0) {       // a protocol error answered before any handler runs
        const http_response r{
            status,
            "application/json",
            error_body(status_reason(status),
                       status == 413 ? "invalid_request_error" : "BadRequestError", status),
            {}};
        keep_alive_ = false;
        co_await send(r);
        break;
      }
      keep_alive_ = req.keep_alive;
      extra_headers_.clear();
      // HEAD is GET without the body (RFC 9110 9.3.2): routed as GET, answered with its headers.
      head_ = req.method == "HEAD";
      if (head_) req.method = "GET";
      server_.active_requests_.fetch_add(1, std::memory_order_relaxed);
      response_writer w(*this);
      bool failed = false;
      try {
        co_await server_.handler_(req, w);
      } catch (const std::exception&) {
        failed = true;
      }
      if (failed) {
        // A handler bug must not take the server down; the client sees a 500 when nothing was sent.
        keep_alive_ = false;
        if (!responded_) {
          const http_response r{500,
                                "application/json",
                                error_body("internal error", "InternalServerError", 500),
                                {}};
          co_await send(r);
        }
      }
      server_.active_requests_.fetch_sub(1, std::memory_order_relaxed);
      if (!responded_ || gone_ || !keep_alive_) break;
      responded_ = false;
    }
    asio::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    server_.forget(this);
  }

  // Reads one request. Returns 0 (parsed), a status to answer with (400/408/413/431), or -1.
  asio::awaitable<int> read_request(http_request& out) {
    request_parser parser(server_.limits_);
    bool started = !buf_.empty();
    bool sent_continue = false;
    auto deadline = std::chrono::steady_clock::now() + server_.limits_.request_timeout;
    while (!parser.done()) {
      if (!buf_.empty()) {
        if (int status = parser.feed(buf_)) co_return status;
        if (parser.done()) break;
        if (parser.header_done() && !sent_continue) {
          sent_continue = true;
          if (parser.expects_continue()) {
            static constexpr std::string_view k_continue = "HTTP/1.1 100 Continue\r\n\r\n";
            if (!co_await write_all(k_continue)) co_return -1;
          }
        }
      }
      // Need more bytes: the idle timeout applies before the first byte, the request timeout after.
      auto now = std::chrono::steady_clock::now();
      auto limit = started ? deadline - now
                           : std::chrono::steady_clock::duration(server_.limits_.idle_timeout);
      if (limit <= std::chrono::steady_clock::duration::zero()) co_return started ? 408 : -1;
      char tmp[16384];
      timer_.expires_after(limit);
      auto r = co_await (socket_.async_read_some(asio::buffer(tmp), nothrow) ||
                         timer_.async_wait(nothrow));
      if (r.index() == 1) co_return started ? 408 : -1;  // timed out
      auto [ec, n] = std::get<0>(r);
      if (ec) co_return -1;  // EOF or reset: nothing to answer
      buf_.append(tmp, n);
      if (!started) {
        started = true;
        deadline = std::chrono::steady_clock::now() + server_.limits_.request_timeout;
      }
    }
    out = parser.take();
    co_return 0;
  }

  asio::awaitable<bool> write_all(std::string_view data) {
    if (gone_) co_return false;
    timer_.expires_after(server_.limits_.write_timeout);
    auto r =
        co_await (asio::async_write(socket_, asio::buffer(data.data(), data.size()), nothrow) ||
                  timer_.async_wait(nothrow));
    if (r.index() == 1 || std::get<0>(std::get<0>(r))) {
      gone_ = true;  // timed out (slow reader) or failed: the client is treated as gone
      asio::error_code ec;
      socket_.close(ec);
      co_return false;
    }
    co_return true;
  }

  asio::awaitable<bool> send(const http_response& r) {
    bh::response<bh::string_body> msg{static_cast<bh::status>(r.status), 11};
    msg.reason(status_reason(r.status));
    msg.set(bh::field::server, "coserve");
    msg.set(bh::field::content_type, r.content_type);
    for (const auto& [k, v] : extra_headers_) msg.set(k, v);
    for (const auto& [k, v] : r.headers) msg.set(k, v);
    msg.keep_alive(keep_alive_);
    msg.body() = r.body;
    msg.prepare_payload();
    responded_ = true;
    const std::string bytes = serialize(msg, head_);
    co_return co_await write_all(bytes);
  }

  asio::awaitable<bool> begin_stream(int status, std::string_view content_type) {
    bh::response<bh::empty_body> msg{static_cast<bh::status>(status), 11};
    msg.reason(status_reason(status));
    msg.set(bh::field::server, "coserve");
    msg.set(bh::field::content_type, content_type);
    msg.set(bh::field::cache_control, "no-cache");
    for (const auto& [k, v] : extra_headers_) msg.set(k, v);
    msg.keep_alive(keep_alive_);
    msg.chunked(true);
    responded_ = true;
    const std::string bytes = serialize(msg, true);
    co_return co_await write_all(bytes);
  }

  asio::awaitable<bool> write_chunk(std::string_view data) {
    if (head_) co_return false;  // no body: the stream ends as if the client had gone
    if (data.empty()) co_return !gone_;
    char size[20];
    int len = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    std::string frame;
    frame.reserve(data.size() + static_cast<std::size_t>(len) + 2);
    frame.append(size, static_cast<std::size_t>(len)).append(data).append("\r\n");
    co_return co_await write_all(frame);
  }

  asio::awaitable<bool> end_stream() {
    if (head_) co_return true;
    co_return co_await write_all("0\r\n\r\n");
  }

  asio::awaitable<bool> wait_disconnect() {
    char tmp[4096];
    for (;;) {
      auto [ec, n] = co_await socket_.async_read_some(asio::buffer(tmp), nothrow);
      if (ec == asio::error::operation_aborted) co_return false;
      if (ec) {
        gone_ = true;
        co_return true;
      }
      if (buf_.size() + n > server_.limits_.max_header_bytes + server_.limits_.max_body_bytes) {
        gone_ = true;  // a client flooding pipelined bytes while we stream is dropped
        co_return true;
      }
      buf_.append(tmp, n);
    }
  }

  void close_if_idle() {
    if (idle_) {
      asio::error_code ec;
      socket_.cancel(ec);
      timer_.cancel();
    }
  }

  http_server& server_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  std::string buf_;   // bytes read but not yet parsed (pipelining)
  bool idle_ = true;  // waiting for a request (stop() may close it)
  bool keep_alive_ = true;
  bool head_ = false;  // the request being answered is a HEAD
  bool responded_ = false;
  bool gone_ = false;
  std::vector<std::pair<std::string, std::string>>
      extra_headers_;  // this request's, on every response
};

asio::awaitable<bool> response_writer::send(const http_response& r) { return conn_.send(r); }
asio::awaitable<bool> response_writer::begin_stream(int status, std::string_view ct) {
  return conn_.begin_stream(status, ct);
}
asio::awaitable<bool> response_writer::write_chunk(std::string_view d) {
  return conn_.write_chunk(d);
}
asio::awaitable<bool> response_writer::end_stream() { return conn_.end_stream(); }
void response_writer::add_header(std::string name, std::string value) {
  conn_.extra_headers_.emplace_back(std::move(name), std::move(value));
}
asio::awaitable<bool> response_writer::wait_disconnect() { return conn_.wait_disconnect(); }
bool response_writer::client_gone() const noexcept { return conn_.gone_; }

http_server::http_server(asio::io_context& io, server_limits limits, request_handler handler)
    : io_(io), limits_(limits), handler_(std::move(handler)), acceptor_(io) {}

http_server::~http_server() = default;

result<uint16_t> http_server::listen(const std::string& host, uint16_t port) {
  asio::error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  if (ec) return make_error("invalid_argument", "bad host address '" + host + "': " + ec.message());
  tcp::endpoint ep(addr, port);
  acceptor_.open(ep.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return make_error(
        "io", "cannot listen on " + host + ":" + std::to_string(port) + ": " + ec.message());
  uint16_t bound = acceptor_.local_endpoint().port();
  asio::co_spawn(io_, accept_loop(), asio::detached);
  return bound;
}

asio::awaitable<void> http_server::accept_loop() {
  while (!stopping_.load(std::memory_order_relaxed)) {
    auto [ec, socket] = co_await acceptor_.async_accept(asio::make_strand(io_), nothrow);
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) co_return;
      continue;  // e.g. EMFILE: keep serving the connections we have
    }
    if (open_connections_.load(std::memory_order_relaxed) >=
        static_cast<int64_t>(limits_.max_connections)) {
      asio::error_code ignored;
      socket.close(ignored);
      continue;
    }
    asio::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    auto c = std::make_shared<connection>(*this, std::move(socket));
    open_connections_.fetch_add(1, std::memory_order_relaxed);
    {
      std::lock_guard lk(conns_mu_);
      std::erase_if(conns_, [](const auto& w) { return w.expired(); });
      conns_.push_back(c);
    }
    auto ex = c->socket_.get_executor();
    asio::co_spawn(ex, c->run(), asio::detached);
  }
}

void http_server::forget(connection*) { open_connections_.fetch_sub(1, std::memory_order_relaxed); }

void http_server::stop() {
  stopping_.store(true, std::memory_order_relaxed);
  asio::post(io_, [this] {
    asio::error_code ec;
    acceptor_.close(ec);
  });
  std::lock_guard lk(conns_mu_);
  for (auto& w : conns_)
    if (auto c = w.lock()) asio::post(c->socket_.get_executor(), [c] { c->close_if_idle(); });
}

}  // namespace coserve::http
