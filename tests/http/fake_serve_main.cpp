// A stand-in for `coserve serve` backed by the fake engine, so the Python client tests can check
// the HTTP layer alone:  COSERVE_BIN=build-http/tests/coserve_fake_serve pytest tests/python
// Accepts `serve --demo --port N [--api-key K] [--max-waiting-requests N] [--max-num-seqs N]`.
#include <asio/signal_set.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <thread>
#include <vector>

#include "tests/http/test_client.hpp"

int main(int argc, char** argv) {
  coserve::test::fake_engine engine;
  engine.token_delay_ms = 2;
  coserve::http::api_options opts;
  int port = 8000, seqs = 1000, waiting = 0;
  for (int i = 1; i + 1 < argc; ++i) {
    std::string_view f = argv[i];
    if (f == "--port")
      port = std::atoi(argv[++i]);
    else if (f == "--api-key")
      opts.api_key = argv[++i];
    else if (f == "--max-num-seqs")
      seqs = std::atoi(argv[++i]);
    else if (f == "--max-waiting-requests")
      waiting = std::atoi(argv[++i]);
  }
  engine.max_in_flight = seqs + waiting;
  asio::io_context io;
  coserve::http::openai_api api(engine, opts);
  coserve::http::http_server server(
      io, {}, [&api](coserve::http::http_request& r, coserve::http::response_writer& w) {
        return api.handle(r, w);
      });
  auto bound = server.listen("127.0.0.1", static_cast<uint16_t>(port));
  if (!bound) return 1;
  std::fprintf(stderr, "[fake-serve] listening on http://127.0.0.1:%u\n",
               static_cast<unsigned>(*bound));
  std::fflush(stderr);
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const asio::error_code&, int) {
    server.stop();
    io.stop();
  });
  io.run();
  return 0;
}
