// Test fixtures: a server (fake engine + openai_api + http_server) on 127.0.0.1:0 run by its own
// thread, and a blocking raw-socket HTTP client for byte-exact checks.
#pragma once

#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <memory>
#include <string>
#include <thread>

#include "http/openai_api.hpp"
#include "http/server.hpp"
#include "tests/http/fake_engine.hpp"

namespace coserve::test {

struct server_fixture {
  explicit server_fixture(http::server_limits limits = {}, http::api_options opts = {})
      : api(engine, std::move(opts)),
        server(io, limits, [this](http::http_request& r, http::response_writer& w) {
          return api.handle(r, w);
        }) {
    auto p = server.listen("127.0.0.1", 0);
    port = p ? *p : 0;
    thread = std::thread([this] { io.run(); });
  }
  ~server_fixture() {
    server.stop();
    io.stop();
    thread.join();
  }
  fake_engine engine;
  asio::io_context io;
  http::openai_api api;
  http::http_server server;
  uint16_t port = 0;
  std::thread thread;
};

struct raw_response {
  int status = 0;
  std::string head;  // status line + headers
  std::string body;  // de-chunked
};

inline std::string dechunk(const std::string& s) {
  std::string out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t eol = s.find("\r\n", pos);
    if (eol == std::string::npos) break;
    size_t n = std::stoul(s.substr(pos, eol - pos), nullptr, 16);
    if (n == 0) break;
    out += s.substr(eol + 2, n);
    pos = eol + 2 + n + 2;
  }
  return out;
}

inline raw_response parse_raw(const std::string& all) {
  raw_response r;
  size_t end = all.find("\r\n\r\n");
  if (end == std::string::npos) return r;
  r.head = all.substr(0, end);
  r.status = std::stoi(all.substr(9, 3));
  std::string body = all.substr(end + 4);
  r.body = r.head.find("Transfer-Encoding: chunked") != std::string::npos ? dechunk(body) : body;
  return r;
}

// Sends `raw` bytes on a fresh connection and reads until the server closes.
inline std::string exchange_raw(uint16_t port, const std::string& raw) {
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  s.connect({asio::ip::make_address("127.0.0.1"), port});
  asio::write(s, asio::buffer(raw));
  std::string all;
  char buf[8192];
  asio::error_code ec;
  for (;;) {
    size_t n = s.read_some(asio::buffer(buf), ec);
    if (ec) break;
    all.append(buf, n);
  }
  return all;
}

inline raw_response request(uint16_t port, const std::string& method, const std::string& target,
                            const std::string& body = {}, const std::string& extra_headers = {}) {
  std::string raw = method + " " + target +
                    " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + extra_headers;
  if (!body.empty() || method == "POST")
    raw +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  raw += "\r\n" + body;
  return parse_raw(exchange_raw(port, raw));
}

}  // namespace coserve::test
