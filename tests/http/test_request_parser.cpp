// request_parser, the sans-I/O half of the connection loop: byte-at-a-time input, pipelining,
// limits and malformed requests.
#include <catch2/catch.hpp>
#include <string>

#include "http/request_parser.hpp"

using namespace coserve::http;

TEST_CASE("request_parser: a request fed one byte at a time, then a pipelined one",
          "[http][parser]") {
  server_limits limits;
  const std::string wire =
      "POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
      "Content-Length: 13\r\nExpect: 100-Continue\r\n\r\n{\"prompt\":1}\n"
      "GET /health HTTP/1.1\r\nConnection: close\r\n\r\n";
  std::string buf;
  request_parser p(limits);
  size_t pos = 0;
  bool saw_continue = false;
  while (!p.done()) {
    REQUIRE(pos < wire.size());
    buf += wire[pos++];
    REQUIRE(p.feed(buf) == 0);
    saw_continue = saw_continue || p.expects_continue();
  }
  CHECK(saw_continue);
  http_request r = p.take();
  CHECK(r.method == "POST");
  CHECK(r.path() == "/v1/completions");
  CHECK(r.header("content-type") == "application/json");
  CHECK(r.body == "{\"prompt\":1}\n");
  CHECK(r.keep_alive);

  buf += wire.substr(pos);
  request_parser next(limits);
  REQUIRE(next.feed(buf) == 0);
  REQUIRE(next.done());
  CHECK(buf.empty());
  http_request g = next.take();
  CHECK(g.method == "GET");
  CHECK(g.target == "/health");
  CHECK_FALSE(g.keep_alive);
  CHECK_FALSE(next.expects_continue());
}

TEST_CASE("request_parser: chunked bodies, limits and malformed input", "[http][parser]") {
  server_limits limits;
  limits.max_header_bytes = 256;
  limits.max_body_bytes = 16;
  auto status_of = [&](std::string wire) {
    request_parser p(limits);
    return p.feed(wire);
  };
  {
    request_parser p(limits);
    std::string wire =
        "POST /x HTTP/1.1\r\nTransfer-Encoding: "
        "chunked\r\n\r\n3\r\nabc\r\n2;e=1\r\nde\r\n0\r\n\r\n";
    REQUIRE(p.feed(wire) == 0);
    REQUIRE(p.done());
    CHECK(p.take().body == "abcde");
  }
  CHECK(status_of("GET / HTTP/1.1\r\nX: " + std::string(300, 'a') + "\r\n\r\n") == 431);
  CHECK(status_of("POST / HTTP/1.1\r\nContent-Length: 17\r\n\r\n") == 413);
  CHECK(status_of("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n11\r\n" +
                  std::string(17, 'a')) == 413);
  CHECK(status_of("GET / HTTP/9.9 nonsense\r\n\r\n") == 400);
  CHECK(status_of("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n") == 400);
  CHECK(status_of("\x01\x02\x03 / HTTP/1.1\r\n\r\n") == 400);
  // Incomplete input is not an error: the parser waits for more.
  request_parser partial(limits);
  std::string half = "GET / HTTP/1.1\r\nHost:";
  CHECK(partial.feed(half) == 0);
  CHECK_FALSE(partial.done());
  CHECK_FALSE(partial.header_done());
}
