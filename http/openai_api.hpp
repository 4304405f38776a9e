// openai_api: the request router of the OpenAI-compatible server. Maps routes to handlers, checks
// the API key, turns validated requests into engine submissions and engine output into JSON bodies
// or SSE streams. Talks to the engine only through the coserve::engine facade.
//
// Threads: handle() runs on the calling connection's strand; the object is shared by every
// connection (its mutable state is the metrics object and the id generator, both locked).
#pragma once

#include <asio/awaitable.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "actors/engine.hpp"
#include "http/api_error.hpp"
#include "http/chat_output.hpp"
#include "http/cors.hpp"
#include "http/openai_request.hpp"
#include "http/output_reader.hpp"
#include "http/prometheus_metrics.hpp"
#include "http/routes.hpp"
#include "http/server.hpp"
#include "http/status_view.hpp"
#include "http/tool_calls.hpp"

namespace coserve::http {

struct api_options {
  std::string api_key;            // when set, /v1/* needs "Authorization: Bearer <key>"
  std::string version = "0.1.0";  // GET /version
  std::string served_model_name;  // the metrics' model label before an engine is attached
  // Streams write an SSE comment (": keep-alive") after this long without output (0: never).
  std::chrono::milliseconds sse_keepalive{std::chrono::seconds(15)};
  // Tool calling (vLLM's flags): tool_choice "auto" is served only with both set.
  bool enable_auto_tool_choice = false;
  std::string tool_call_parser;  // a name from tool_parser_names(), or ""
  std::string reasoning_parser;  // a name from reasoning_parser_names(), or ""
  // vLLM's --trust-request-chat-template: chat requests may bring their own chat_template.
  bool trust_request_chat_template = false;
  // CORS (vLLM's --allowed-origins/-methods/-headers/-credentials; http/cors.hpp). Default: pages
  // of any origin may call the API, without credentials.
  cors_policy cors;
  // The web UI: the chat page (GET /), the live view (GET /status), their files (GET /webui/*)
  // and the view's data (GET /api/status, /api/trace). Off: all of them answer 404.
  bool webui = true;
};

// Seconds since the Unix epoch (the `created` fields).
int64_t unix_now();

// An engine error as an HTTP error: queue_full 429, engine_down 503, request errors 400 (param from
// the error, else `param`); `input_error`: any other code is the client's mistake too (400).
api_error from_engine_error(const error& e, const std::string& param, bool input_error = false);

// Lifecycle: an api made without an engine answers while the model loads — /health 503
// {"status":"loading"}, the other model routes 503 with Retry-After — until attach(). After
// set_draining(), /health and new generation requests answer 503 too.
class openai_api {
 public:
  openai_api(engine& e, api_options options);
  explicit openai_api(api_options options);
  ~openai_api();
  // Any thread, once: the engine serves from now on (and, with the web UI, the status history
  // starts sampling it once a second).
  void attach(engine& e);
  // Any thread: stops using the engine in the background (the status sampler); call before the
  // engine is destroyed. Idempotent.
  void detach_background() { history_.stop(); }
  // Any thread: the server is shutting down.
  void set_draining() noexcept { draining_.store(true, std::memory_order_release); }

  // The request_handler of http_server.
  asio::awaitable<void> handle(http_request& req, response_writer& w);

  prometheus_metrics& metrics() noexcept { return metrics_; }
  const model_limits& limits() const noexcept { return limits_; }

 private:
  // Routing steps: the CORS answer (true: a preflight, answered), the API key, then the route's
  // handler (http/routes.hpp).
  asio::awaitable<bool> answer_cors(http_request& req, response_writer& w);
  bool authorized(http_request& req, const std::string& path) const;
  asio::awaitable<void> serve(const route& rt, http_request& req, response_writer& w,
                              const std::optional<std::string>& model_id);
  asio::awaitable<void> version(response_writer& w);
  asio::awaitable<void> answer_loading(const route& rt, response_writer& w);
  asio::awaitable<void> health(response_writer& w);
  asio::awaitable<void> models(response_writer& w, const std::optional<std::string>& model_id);
  asio::awaitable<void> generate(http_request& req, response_writer& w, bool chat);
  asio::awaitable<void> tokenize(http_request& req, response_writer& w);
  asio::awaitable<void> detokenize(http_request& req, response_writer& w);
  // The web UI (http/webui.hpp): a static file, the live view's JSON, the Chrome trace.
  asio::awaitable<void> web_asset(http_request& req, response_writer& w, const struct web_asset& a);
  asio::awaitable<void> status(http_request& req, response_writer& w);
  asio::awaitable<void> trace(http_request& req, response_writer& w);
  asio::awaitable<void> prefix_cache(response_writer& w);
  asio::awaitable<void> reset_prefix_cache(response_writer& w);
  // /v1/responses and /v1/messages (http/responses_api.cpp, http/messages_api.cpp).
  asio::awaitable<void> responses(http_request& req, response_writer& w);
  asio::awaitable<void> messages(http_request& req, response_writer& w);
  // /v1/messages/count_tokens and /v1/responses/input_tokens: the prompt tokens the request's
  // conversation renders to (chat template, tools and system text included), nothing generated.
  asio::awaitable<void> count_input_tokens(http_request& req, response_writer& w, bool anthropic);
  // /v1/completions and /v1/chat/completions (http/completions_api.cpp): one engine request per
  // prompt, submitted (or the error to answer with); a chat request's split rules.
  asio::awaitable<std::variant<std::vector<std::shared_ptr<request_stream>>, api_error>>
  submit_prompts(openai_request& r);
  std::optional<split_rules> split_rules_of(const openai_request& r) const;
  // A non-streamed answer's output: the reader's events into `sink` while the client is watched
  // (one that leaves cancels the requests).
  asio::awaitable<void> collect_output(response_writer& w, output_reader& reader,
                                       choice_sink& sink);
  // A dialect request translated, validated and submitted (or the error to answer with).
  struct dialect_rules {
    std::variant<json::value, api_error> (*translate)(const json::value&);
    std::string (*param)(const std::string&);  // chat param -> the dialect's
    const char* input_param;
    const char* max_tokens_param;
  };
  struct dialect_run {
    json::value body;  // the dialect's request body
    openai_request r;  // its chat translation
    std::shared_ptr<request_stream> s;
  };
  // The dialect body translated and parsed as a chat request (errors name the dialect's fields).
  std::variant<openai_request, api_error> parse_dialect(const json::value& body,
                                                        const dialect_rules& rules) const;
  asio::awaitable<std::variant<dialect_run, api_error>> start_dialect(const std::string& body_text,
                                                                      const dialect_rules& rules);
  // The pooling routes (http/pooling_api.cpp): /v1/embeddings, /v1/score, /v1/rerank and
  // /v2/rerank.
  asio::awaitable<void> embeddings(http_request& req, response_writer& w);
  asio::awaitable<void> score(http_request& req, response_writer& w);
  asio::awaitable<void> rerank(http_request& req, response_writer& w);
  // One pooling request's result: its vector (or class logits) and prompt tokens.
  struct pooled {
    std::vector<float> vector;
    int32_t prompt_tokens = 0;
  };
  // Submits each request as a pooling one (errors name `param`) and waits for every result, in
  // order; a failed request fails the lot.
  asio::awaitable<std::variant<std::vector<pooled>, api_error>> run_pooled(
      std::vector<generate_request> requests, const char* param);
  // Scores of text pairs (a cross-encoder's sigmoid, or the cosine of an embedding model's
  // vectors); `prompt_tokens` receives the tokens computed.
  // `lora_id`: the LoRA adapter named as the model (0: none).
  asio::awaitable<std::variant<std::vector<float>, api_error>> score_pairs(
      const std::vector<std::pair<std::string, std::string>>& pairs, const context_rule& ctx,
      const char* param, int32_t lora_id, int64_t& prompt_tokens);
  // An error in Anthropic's shape (Retry-After on 429), for /v1/messages and its count_tokens.
  asio::awaitable<void> respond_anthropic_error(response_writer& w, const api_error& e);
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
  const struct reasoning_parser* reasoning_ = nullptr;  // options_.reasoning_parser
  prometheus_metrics metrics_;
  status_history history_;
  std::mutex id_mu_;  // guards rng_
  std::mt19937_64 rng_;
};

}  // namespace coserve::http
