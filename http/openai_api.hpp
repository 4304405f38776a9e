// openai_api: the request router of the OpenAI-compatible server. Maps routes to handlers, checks
// the API key, turns validated requests into engine submissions and engine output into JSON bodies
// or SSE streams. Talks to the engine only through the coserve::engine facade.
//
// Threads: handle() runs on the calling connection's strand; the object is shared by every
// connection (its mutable state is the metrics object and the id generator, both locked).
#pragma once

#include <chrono>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <asio/awaitable.hpp>

#include "actors/engine.hpp"
#include "http/api_error.hpp"
#include "http/openai_request.hpp"
#include "http/prometheus_metrics.hpp"
#include "http/server.hpp"

namespace coserve::http {

struct api_options {
  std::string api_key;              // when set, /v1/* needs "Authorization: Bearer <key>"
  std::string version = "0.1.0";    // GET /version
  std::string served_model_name;    // the metrics' model label before an engine is attached
  // Streams write an SSE comment (": keep-alive") after this long without output (0: never).
  std::chrono::milliseconds sse_keepalive{std::chrono::seconds(15)};
  // Tool calling (vLLM's flags): tool_choice "auto" is served only with both set.
  bool enable_auto_tool_choice = false;
  std::string tool_call_parser;     // a name from tool_parser_names(), or ""
};

// Lifecycle: an api made without an engine answers while the model loads — /health 503
// {"status":"loading"}, the other model routes 503 with Retry-After — until attach(). After
// set_draining(), /health and new generation requests answer 503 too.
class openai_api {
 public:
  openai_api(engine& e, api_options options);
  explicit openai_api(api_options options);
  // Any thread, once: the engine serves from now on.
  void attach(engine& e);
  // Any thread: the server is shutting down.
  void set_draining() noexcept { draining_.store(true, std::memory_order_release); }

  // The request_handler of http_server.
  asio::awaitable<void> handle(http_request& req, response_writer& w);

  prometheus_metrics& metrics() noexcept { return metrics_; }
  const model_limits& limits() const noexcept { return limits_; }

 private:
  asio::awaitable<void> generate(http_request& req, response_writer& w, bool chat);
  asio::awaitable<void> tokenize(http_request& req, response_writer& w);
  asio::awaitable<void> detokenize(http_request& req, response_writer& w);
  // Coroutine arguments are references to named locals: GCC 12 destroys non-trivial temporaries of
  // a co_await full-expression twice, so no call site builds one.
  asio::awaitable<void> respond(response_writer& w, http_response& r);
  asio::awaitable<void> respond_json(response_writer& w, int status, std::string& body);
  asio::awaitable<void> respond_error(response_writer& w, const api_error& e);
  std::string new_id(const char* prefix);

  engine& eng() const noexcept { return *engine_.load(std::memory_order_acquire); }

  std::atomic<engine*> engine_{nullptr};
  std::atomic<bool> draining_{false};
  api_options options_;
  model_limits limits_;
  prometheus_metrics metrics_;
  std::mutex id_mu_;  // guards rng_
  std::mt19937_64 rng_;
};

}  // namespace coserve::http
