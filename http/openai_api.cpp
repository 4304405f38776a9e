// The OpenAI routes over an engine. Over 500 lines: one handler per route, and generate() keeps the
// streaming and the whole-body answers together because they share the request's streams,
// choices and usage accounting.
#include "http/openai_api.hpp"

#include <asio/experimental/awaitable_operators.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "http/openai_response.hpp"
#include "http/openapi.hpp"
#include "http/reasoning.hpp"
#include "http/tool_calls.hpp"
#include "http/webui.hpp"
#include "runtime/trace.hpp"

namespace coserve::http {

using namespace asio::experimental::awaitable_operators;
using json::value;

std::string error_json(const api_error& e) {
  value v = json::object{};
  value inner = json::object{};
  inner["message"] = value(e.message);
  inner["type"] = value(e.type);
  inner["param"] = e.param.empty() ? value() : value(e.param);
  inner["code"] = e.code.empty() ? value(int64_t{e.status}) : value(e.code);
  v["error"] = std::move(inner);
  std::string out;
  json::dump_compact(v, out);
  return out;
}

http_response error_response(const api_error& e) {
  http_response r{e.status, "application/json", error_json(e), {}};
  if (e.status == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer");
  // Overload and unavailability are temporary: tell clients when to try again.
  if (e.status == 429) r.headers.emplace_back("Retry-After", "1");
  if (e.status == 503) r.headers.emplace_back("Retry-After", "5");
  return r;
}

namespace {

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct route {
  const char* path;
  const char* method;
};
constexpr route k_routes[] = {
    {"/v1/completions", "POST"},
    {"/v1/chat/completions", "POST"},
    {"/v1/models", "GET"},
    {"/health", "GET"},
    {"/metrics", "GET"},
    {"/tokenize", "POST"},
    {"/detokenize", "POST"},
    {"/version", "GET"},
    {"/openapi.json", "GET"},
    {"/v1/responses", "POST"},
    {"/v1/messages", "POST"},
    {"/api/status", "GET"},
    {"/api/trace", "GET"},
    {"/v1/messages/count_tokens", "POST"},
    {"/v1/responses/input_tokens", "POST"},
};

// "/v1/models/{model}" (OpenAI's retrieveModel): the id, percent-decoded (ids such as
// "meta-llama/Llama-3.1-8B" may come with "/" as is or as %2F); nullopt for any other path or a
// malformed escape.
constexpr std::string_view k_model_prefix = "/v1/models/";
std::optional<std::string> model_in_path(std::string_view path) {
  if (path.size() <= k_model_prefix.size() ||
      path.substr(0, k_model_prefix.size()) != k_model_prefix)
    return std::nullopt;
  const std::string_view rest = path.substr(k_model_prefix.size());
  std::string id;
  for (size_t i = 0; i < rest.size(); ++i) {
    if (rest[i] != '%') {
      id += rest[i];
      continue;
    }
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    if (i + 2 >= rest.size()) return std::nullopt;
    const int hi = hex(rest[i + 1]), lo = hex(rest[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    id += char(hi * 16 + lo);
    i += 2;
  }
  return id;
}

// Streams of one HTTP request (one per prompt) and the index offset of each one's choices.
struct submitted {
  std::vector<std::shared_ptr<request_stream>> streams;
  void cancel_all() noexcept {
    for (auto& s : streams) s->cancel();
  }
};

}  // namespace

// `input_error`: the error came from tokenizing or templating the client's input, so any code but
// the overload ones is the client's mistake (400), never a 500.
api_error from_engine_error(const error& e, const std::string& param, bool input_error) {
  if (e.code == "queue_full")
    return {429,
            e.message.empty() ? "server overloaded, retry later" : e.message,
            "RateLimitError",
            {},
            {}};
  if (e.code == "engine_down")
    return {503,
            e.message.empty() ? "engine unavailable" : e.message,
            "ServiceUnavailableError",
            {},
            {}};
  if (input_error || e.code == "invalid_request" || e.code == "template_error" ||
      e.code == "invalid_argument")
    return api_error::bad_request(e.message, e.param.empty() ? param : e.param);
  return {500, e.message, "InternalServerError", {}, {}};
}

openai_api::openai_api(engine& e, api_options options)
    : options_(std::move(options)),
      metrics_(e.info().served_model_name),
      rng_(std::random_device{}()) {
  attach(e);
}

openai_api::openai_api(api_options options)
    : options_(std::move(options)),
      metrics_(options_.served_model_name),
      rng_(std::random_device{}()) {}

void openai_api::attach(engine& e) {
  const auto& info = e.info();
  limits_.served_model_name = info.served_model_name;
  limits_.served_model_aliases = info.served_model_aliases;
  limits_.trust_request_chat_template = options_.trust_request_chat_template;
  limits_.defaults = info.defaults;
  limits_.vocab_size = info.vocab_size;
  limits_.max_model_len = info.max_model_len;
  limits_.enable_auto_tool_choice = options_.enable_auto_tool_choice;
  limits_.tool_call_parser = find_tool_parser(options_.tool_call_parser);
  reasoning_ = find_reasoning_parser(options_.reasoning_parser);
  engine_.store(&e, std::memory_order_release);  // publishes limits_ to the handlers
  if (options_.webui) history_.start([&e] { return e.metrics(); });
}

openai_api::~openai_api() { history_.stop(); }

std::string openai_api::new_id(const char* prefix) {
  uint64_t a, b;
  {
    std::lock_guard lk(id_mu_);
    a = rng_();
    b = rng_();
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-%016llx%016llx", prefix, static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return buf;
}

asio::awaitable<void> openai_api::respond(response_writer& w, http_response& r) {
  metrics_.count_http(r.status);
  co_await w.send(r);
}

asio::awaitable<void> openai_api::respond_error(response_writer& w, const api_error& e) {
  http_response r = error_response(e);
  co_await respond(w, r);
}

asio::awaitable<void> openai_api::respond_json(response_writer& w, int status, std::string& body) {
  http_response r{status, "application/json", std::move(body), {}};
  co_await respond(w, r);
}

asio::awaitable<void> openai_api::handle(http_request& req, response_writer& w) {
  const std::string path = req.path();
  // CORS: a preflight is answered here, before routing and the API key (browsers send no key with
  // it); every other answer to a request with an Origin carries the policy's headers.
  if (const std::string origin = req.header("origin"); !origin.empty()) {
    cors_answer c =
        cors_for(options_.cors, req.method, origin, req.header("access-control-request-method"),
                 req.header("access-control-request-headers"), !req.header("cookie").empty());
    for (auto& [name, value] : c.headers) w.add_header(std::move(name), std::move(value));
    if (c.preflight_status != 0) {
      http_response r{c.preflight_status,
                      "text/plain; charset=utf-8",
                      c.preflight_status == 200 ? "OK" : c.failure,
                      {}};
      co_await respond(w, r);
      co_return;
    }
  }
  if (options_.webui && req.method == "GET") {
    if (const struct web_asset* a = find_web_asset(path)) co_return co_await web_asset(req, w, *a);
  }
  const route* found = nullptr;
  for (const auto& r : k_routes)
    if (path == r.path && (options_.webui || path.rfind("/api/", 0) != 0)) found = &r;
  static constexpr route k_model_route{"/v1/models/{model}", "GET"};
  const std::optional<std::string> model_id = model_in_path(path);
  if (model_id) found = &k_model_route;
  if (!found) {
    {
      const api_error err_ = api_error::not_found("route " + path + " not found");
      co_await respond_error(w, err_);
    }
    co_return;
  }
  if (req.method != found->method) {
    const api_error e{
        405, "method " + req.method + " not allowed on " + path, "MethodNotAllowed", {}, {}};
    http_response r = error_response(e);
    r.headers.emplace_back("Allow",
                           std::string_view(found->method) == "GET" ? "GET, HEAD" : found->method);
    co_await respond(w, r);
    co_return;
  }
  // The key as OpenAI clients send it (Authorization: Bearer) or as Anthropic's do (X-Api-Key).
  // The web UI's data (/api/*: requests, traffic, traces) needs it too; its static files do not.
  if (!options_.api_key.empty() && (path.rfind("/v1/", 0) == 0 || path.rfind("/api/", 0) == 0) &&
      req.header("authorization") != "Bearer " + options_.api_key &&
      req.header("x-api-key") != options_.api_key) {
    {
      const api_error err_ = {
          401, "invalid or missing API key", "AuthenticationError", {}, "invalid_api_key"};
      co_await respond_error(w, err_);
    }
    co_return;
  }
  if (path == "/version") {
    value v = json::object{};
    v["version"] = value(options_.version);
    std::string body;
    json::dump_compact(v, body);
    co_await respond_json(w, 200, body);
    co_return;
  }
  if (engine_.load(std::memory_order_acquire) == nullptr) {  // still loading the model
    if (path == "/health") {
      std::string body = R"({"status":"loading"})";
      co_await respond_json(w, 503, body);
    } else {
      const api_error e{
          503, "the model is still loading; retry later", "ServiceUnavailableError", {}, {}};
      co_await respond_error(w, e);
    }
    co_return;
  }
  if (path == "/health") {
    std::string reason = draining_.load(std::memory_order_acquire) ? "the server is shutting down"
                                                                   : eng().unhealthy_reason();
    value v = json::object{};
    if (!reason.empty()) {
      v["status"] = value(draining_.load(std::memory_order_acquire) ? "draining" : "unhealthy");
      v["reason"] = value(std::move(reason));
    }
    std::string body;
    json::dump_compact(v, body);
    co_await respond_json(w, v.as_object().empty() ? 200 : 503, body);
    co_return;
  }
  if (draining_.load(std::memory_order_acquire) &&
      (path == "/v1/completions" || path == "/v1/chat/completions" || path == "/v1/responses" ||
       path == "/v1/messages")) {
    const api_error e{503, "the server is shutting down", "ServiceUnavailableError", {}, {}};
    co_await respond_error(w, e);
    co_return;
  }
  if (path == "/v1/completions") co_return co_await generate(req, w, false);
  if (path == "/v1/chat/completions") co_return co_await generate(req, w, true);
  if (path == "/v1/responses") co_return co_await responses(req, w);
  if (path == "/v1/messages") co_return co_await messages(req, w);
  if (path == "/v1/messages/count_tokens") co_return co_await count_input_tokens(req, w, true);
  if (path == "/v1/responses/input_tokens") co_return co_await count_input_tokens(req, w, false);
  if (path == "/api/status") co_return co_await status(req, w);
  if (path == "/api/trace") co_return co_await trace(req, w);
  if (path == "/tokenize") co_return co_await tokenize(req, w);
  if (path == "/detokenize") co_return co_await detokenize(req, w);
  if (path == "/metrics") {
    http_response r{200, "text/plain; version=0.0.4; charset=utf-8", metrics_.scrape(eng()), {}};
    co_await respond(w, r);
    co_return;
  }
  if (path == "/openapi.json") {
    std::string body = openapi_json(limits_, options_.version);
    co_await respond_json(w, 200, body);
    co_return;
  }
  // /v1/models and /v1/models/{model}
  const auto& info = eng().info();
  if (model_id && !limits_.serves(*model_id)) {
    const api_error e{404, "The model `" + *model_id + "` does not exist.", "NotFoundError",
                      "model", "model_not_found"};
    co_await respond_error(w, e);
    co_return;
  }
  auto card = [&](const std::string& id) {  // one entry per name, as vLLM lists them
    value m = json::object{};
    m["id"] = value(id);
    m["object"] = value("model");
    m["created"] = value(info.created);
    m["owned_by"] = value("coserve");
    m["root"] = value(info.served_model_name);
    m["max_model_len"] = value(int64_t{info.max_model_len});
    return m;
  };
  std::string body;
  if (model_id) {
    json::dump_compact(card(*model_id), body);
    co_await respond_json(w, 200, body);
    co_return;
  }
  value list = json::object{};
  list["object"] = value("list");
  list["data"] = json::array{};
  list["data"].push_back(card(info.served_model_name));
  for (const std::string& alias : info.served_model_aliases) list["data"].push_back(card(alias));
  json::dump_compact(list, body);
  co_await respond_json(w, 200, body);
}

asio::awaitable<void> openai_api::web_asset(http_request&, response_writer& w,
                                            const struct web_asset& a) {
  http_response r{200, std::string(a.content_type), std::string(a.body), {}};
  r.headers.emplace_back("Content-Security-Policy", std::string(k_webui_csp));
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  r.headers.emplace_back("Referrer-Policy", "no-referrer");
  r.headers.emplace_back("X-Frame-Options", "DENY");
  r.headers.emplace_back("Cache-Control", "no-cache");
  co_await respond(w, r);
}

asio::awaitable<void> openai_api::status(http_request&, response_writer& w) {
  engine& e = eng();
  status_inputs in;
  in.model = e.info().served_model_name;
  in.uptime_seconds = double(unix_now() - e.info().created);
  in.unhealthy_reason = draining_.load(std::memory_order_acquire) ? "the server is shutting down"
                                                                  : e.unhealthy_reason();
  in.metrics = e.metrics();
  in.history = history_.samples();
  in.history_period_seconds = std::chrono::duration<double>(history_.period()).count();
  if (auto reqs = co_await e.requests(200); reqs) in.requests = std::move(*reqs);
  in.trace = e.tracer();
  std::string body = status_json(in);
  http_response r{200, "application/json", std::move(body), {}};
  r.headers.emplace_back("Cache-Control", "no-store");
  co_await respond(w, r);
}

asio::awaitable<void> openai_api::trace(http_request&, response_writer& w) {
  const rt::tracer* tr = eng().tracer();
  if (tr == nullptr || !tr->enabled()) {
    const api_error e = api_error::not_found("tracing is off in this engine");
    co_return co_await respond_error(w, e);
  }
  http_response r{200, "application/json", tr->chrome_json(), {}};
  r.headers.emplace_back("Content-Disposition", "attachment; filename=\"coserve-trace.json\"");
  r.headers.emplace_back("Cache-Control", "no-store");
  co_await respond(w, r);
}

asio::awaitable<void> openai_api::tokenize(http_request& req, response_writer& w) {
  auto parsed = parse_json_object(req.body);
  if (auto* e = std::get_if<api_error>(&parsed)) {
    const api_error err_ = *e;
    co_return co_await respond_error(w, err_);
  }
  const value& body = std::get<value>(parsed);
  result<std::vector<int32_t>> ids =
      make_error("invalid_request", "'prompt' or 'messages' is required");
  std::string param = "prompt";
  if (const value* m = body.find("messages"); m && !m->is_null()) {
    param = "messages";
    auto r = parse_openai_request(req.body, true, limits_);
    if (auto* e = std::get_if<api_error>(&r)) {
      const api_error err_ = *e;
      co_return co_await respond_error(w, err_);
    }
    tokenize_request_input in;
    in.input = std::move(std::get<openai_request>(r).chat_in);
    ids = co_await eng().tokenize(std::move(in));
  } else if (const value* p = body.find("prompt"); p && !p->is_null()) {
    if (!p->is_string()) {
      const api_error err_ = api_error::bad_request("'prompt' must be a string", "prompt");
      co_return co_await respond_error(w, err_);
    }
    bool add_special = true;
    if (const value* a = body.find("add_special_tokens"); a && !a->is_null()) {
      if (!a->is_bool()) {
        const api_error err_ =
            api_error::bad_request("'add_special_tokens' must be a boolean", "add_special_tokens");
        co_return co_await respond_error(w, err_);
      }
      add_special = a->as_bool();
    }
    tokenize_request_input in;
    in.input = p->as_string();
    in.add_special_tokens = add_special;
    ids = co_await eng().tokenize(std::move(in));
  }
  if (!ids) {
    const api_error err_ = from_engine_error(
        ids.err(), param, ids.err().code != "queue_full" && ids.err().code != "engine_down");
    co_return co_await respond_error(w, err_);
  }
  value out = json::object{};
  out["count"] = value(static_cast<int64_t>(ids->size()));
  out["max_model_len"] = value(int64_t{limits_.max_model_len});
  value arr = json::array{};
  for (int32_t id : *ids) arr.push_back(value(int64_t{id}));
  out["tokens"] = std::move(arr);
  std::string text;
  json::dump_compact(out, text);
  co_await respond_json(w, 200, text);
}

asio::awaitable<void> openai_api::detokenize(http_request& req, response_writer& w) {
  auto parsed = parse_json_object(req.body);
  if (auto* e = std::get_if<api_error>(&parsed)) {
    const api_error err_ = *e;
    co_return co_await respond_error(w, err_);
  }
  const value& body = std::get<value>(parsed);
  const value* t = body.find("tokens");
  if (!t || !t->is_array()) {
    const api_error err_ =
        api_error::bad_request("'tokens' must be an array of token ids", "tokens");
    co_return co_await respond_error(w, err_);
  }
  std::vector<int32_t> ids;
  for (const auto& x : t->as_array()) {
    if (!x.is_int() || x.as_int() < 0 || x.as_int() >= limits_.vocab_size) {
      const api_error err_ = api_error::bad_request(
          "'tokens' must hold ids in [0, " + std::to_string(limits_.vocab_size) + ")", "tokens");
      co_return co_await respond_error(w, err_);
    }
    ids.push_back(static_cast<int32_t>(x.as_int()));
  }
  auto text = co_await eng().detokenize(std::move(ids));
  if (!text) {
    const api_error err_ = from_engine_error(
        text.err(), "tokens", text.err().code != "queue_full" && text.err().code != "engine_down");
    co_return co_await respond_error(w, err_);
  }
  value out = json::object{};
  out["prompt"] = value(*text);
  std::string s;
  json::dump_compact(out, s);
  co_await respond_json(w, 200, s);
}

asio::awaitable<void> openai_api::generate(http_request& req, response_writer& w, bool chat) {
  auto parsed = parse_openai_request(req.body, chat, limits_);
  if (auto* e = std::get_if<api_error>(&parsed)) {
    const api_error err_ = *e;
    co_return co_await respond_error(w, err_);
  }
  openai_request& r = std::get<openai_request>(parsed);

  // The tokenizer pool renders, encodes and applies the context rule (errors name the field);
  // one engine request per prompt.
  const bool want_logprobs = r.params.logprobs >= 0 && !r.logprobs_for_ranking;
  std::vector<generate_request> gens;
  if (chat) {
    generate_request g;
    g.input = std::move(r.chat_in);
    g.add_special_tokens = false;
    gens.push_back(std::move(g));
  } else {
    for (auto& p : r.prompts) {
      generate_request g;
      if (auto* text = std::get_if<std::string>(&p))
        g.input = std::move(*text);
      else
        g.input = std::move(std::get<std::vector<int32_t>>(p));
      g.return_prompt_text = r.echo;
      gens.push_back(std::move(g));
    }
  }
  submitted sub;
  for (auto& g : gens) {
    g.params = r.params;
    g.structured = r.structured;
    g.context = context_of(r);
    g.return_token_text = want_logprobs || r.params.prompt_logprobs >= 0;
    auto s = co_await eng().submit(std::move(g));
    if (!s) {
      sub.cancel_all();
      const api_error err_ = from_engine_error(s.err(), chat ? "messages" : "prompt");
      co_return co_await respond_error(w, err_);
    }
    sub.streams.push_back(std::move(*s));
  }

  const int32_t n = r.params.n;
  // The name the request used (one of --served-model-name's), as vLLM echoes it.
  response_header h{new_id(chat ? "chatcmpl" : "cmpl"), unix_now(),
                    r.model.empty() ? limits_.served_model_name : r.model, chat};
  // Token strings for logprobs, as the streamer decoded them (output_event::token_texts).
  std::unordered_map<int32_t, std::string> token_text;
  auto learn_texts = [&](const output_event& ev) {
    for (size_t i = 0; i < ev.token_ids.size() && i < ev.token_texts.size(); ++i)
      token_text.try_emplace(ev.token_ids[i], ev.token_texts[i]);
    for (size_t i = 0; i < ev.top_logprobs.size() && i < ev.top_logprob_texts.size(); ++i)
      for (size_t k = 0; k < ev.top_logprobs[i].size() && k < ev.top_logprob_texts[i].size(); ++k)
        token_text.try_emplace(ev.top_logprobs[i][k].token, ev.top_logprob_texts[i][k]);
    for (const auto& [id, t] : ev.prompt_token_texts) token_text.try_emplace(id, t);
  };
  token_text_fn text_of = [&token_text](int32_t id) {
    auto it = token_text.find(id);
    return it == token_text.end() ? std::string() : it->second;
  };
  // The tokens' names in logprobs: their text, or "token_id:N" with vLLM's
  // return_tokens_as_token_ids (text_offset then counts those names, as vLLM's does). The
  // prompt_logprobs field's decoded_token stays the text.
  token_text_fn name_of =
      r.tokens_as_ids ? token_text_fn([](int32_t id) { return "token_id:" + std::to_string(id); })
                      : text_of;
  std::vector<choice_state> choices(sub.streams.size() * static_cast<size_t>(n));
  for (size_t i = 0; i < choices.size(); ++i) choices[i].index = static_cast<int32_t>(i);
  std::vector<int64_t> text_offsets(choices.size(), 0);
  int64_t prompt_tokens = 0, cached_tokens = 0;
  std::string engine_failure;

  // Client gone while we wait or stream: cancel every stream at once.
  auto watch = [&]() -> asio::awaitable<void> {
    if (co_await w.wait_disconnect()) {
      sub.cancel_all();
      metrics_.count_client_disconnect();
    }
  };

  if (!r.stream) {
    auto collect = [&]() -> asio::awaitable<void> {
      for (size_t p = 0; p < sub.streams.size(); ++p) {
        auto& s = sub.streams[p];
        prompt_tokens += static_cast<int64_t>(s->prompt_ids().size());
        int32_t cached = 0;
        while (auto ev = co_await s->next()) {
          if (ev->finish == finish_reason::error && engine_failure.empty())
            engine_failure = ev->error_message.empty() ? "engine failure" : ev->error_message;
          cached = std::max(cached, ev->cached_prompt_tokens);
          if (want_logprobs || r.params.prompt_logprobs >= 0) learn_texts(*ev);
          choices[p * static_cast<size_t>(n) + static_cast<size_t>(ev->index)].add(*ev);
        }
        cached_tokens += cached;
      }
    };
    co_await (collect() || watch());
    if (w.client_gone()) co_return;
    if (!engine_failure.empty()) {
      const api_error err_ = {500, engine_failure, "InternalServerError", {}, {}};
      co_return co_await respond_error(w, err_);
    }
    int64_t completion_tokens = 0;
    for (const auto& c : choices)
      completion_tokens += c.completion_tokens;  // every sample generated
    if (r.returned > 0) keep_best(choices, n, r.returned);
    const size_t group = size_t(r.returned > 0 ? r.returned : n);  // choices per prompt now
    std::vector<value> lps, plps;
    for (size_t i = 0; i < choices.size(); ++i) {
      auto& c = choices[i];
      if (chat && reasoning_) {
        reasoning_split sp = split_reasoning(*reasoning_, c.text);
        c.reasoning = std::move(sp.reasoning);
        c.has_reasoning = sp.has_reasoning;
        c.text = std::move(sp.content);
      }
      if (chat && r.tools != tool_mode::none) {
        parsed_tool_output p =
            parse_tool_output(r.tools, limits_.tool_call_parser, r.tool_name, c.text);
        c.text = std::move(p.content);
        c.tool_calls = std::move(p.calls);
      }
      if (!chat && r.echo) c.text = sub.streams[i / group]->prompt_text() + c.text;
      if (chat && !r.chat_echo.empty()) c.text = r.chat_echo + c.text;
      // The prompt's logprobs came with one sample of the prompt: every choice of it shares them.
      const std::vector<prompt_logprob>* prompt_lps = nullptr;
      for (size_t k = i / group * group; k < (i / group + 1) * group; ++k)
        if (!choices[k].prompt_logprobs.empty()) prompt_lps = &choices[k].prompt_logprobs;
      static const std::vector<prompt_logprob> none;
      const auto& prompt_ids = sub.streams[i / group]->prompt_ids();
      if (r.prompt_logprobs_field)
        plps.push_back(prompt_logprobs_json(prompt_ids, prompt_lps ? *prompt_lps : none, text_of));
      if (!want_logprobs)
        lps.emplace_back();
      else if (chat)
        lps.push_back(chat_logprobs(c.token_ids, c.token_logprobs, c.top_logprobs, name_of));
      else if (r.echo)
        lps.push_back(completion_logprobs_echo(prompt_ids, prompt_lps ? *prompt_lps : none,
                                               c.token_ids, c.token_logprobs, c.top_logprobs,
                                               name_of));
      else
        lps.push_back(
            completion_logprobs(c.token_ids, c.token_logprobs, c.top_logprobs, 0, name_of));
    }
    value usage = usage_json(prompt_tokens, completion_tokens, cached_tokens);
    const std::vector<value>* plp = r.prompt_logprobs_field ? &plps : nullptr;
    std::string body = chat ? chat_body(h, choices, lps, usage, plp)
                            : completion_body(h, choices, lps, usage, plp);
    co_return co_await respond_json(w, 200, body);
  }

  // Streaming.
  metrics_.count_http(200);
  if (!co_await w.begin_stream(200, "text/event-stream")) {
    sub.cancel_all();
    co_return;
  }
  // Writes are serialised with the keep-alive comments (both run on the connection's strand; a
  // write in progress is waited for, never interleaved).
  bool writing = false;
  auto last_write = std::chrono::steady_clock::now();
  auto ex = co_await asio::this_coro::executor;
  auto wait_writer = [&]() -> asio::awaitable<void> {
    asio::steady_timer t(ex);
    while (writing) {
      t.expires_after(std::chrono::milliseconds(1));
      co_await t.async_wait(asio::use_awaitable);
    }
  };
  auto write = [&](const std::string& chunk) -> asio::awaitable<bool> {
    co_await wait_writer();
    writing = true;
    const bool ok = co_await w.write_chunk(chunk);
    writing = false;
    last_write = std::chrono::steady_clock::now();
    co_return ok;
  };
  // An SSE comment after `sse_keepalive` without output, so proxies and clients with read
  // timeouts keep a stream that waits long (queued, or a long prefill) open.
  auto keepalive = [&]() -> asio::awaitable<void> {
    asio::steady_timer t(ex);
    const auto every = options_.sse_keepalive;
    for (;;) {
      if (every.count() <= 0)
        t.expires_at(asio::steady_timer::time_point::max());
      else
        t.expires_at(last_write + every);
      co_await t.async_wait(asio::use_awaitable);
      if (writing || std::chrono::steady_clock::now() - last_write < every) continue;
      const std::string comment(k_sse_keepalive);
      if (!co_await write(comment)) co_return;
    }
  };
  const bool usage_null = r.include_usage;
  // continuous_usage_stats: each chunk carries its choice's usage so far.
  value live_usage;
  if (r.continuous_usage) h.usage = &live_usage;
  auto set_usage = [&](int64_t prompt, int64_t completion) {
    if (r.continuous_usage) live_usage = usage_json(prompt, completion, 0);
  };
  // Chat with tools: which text streams as content and which becomes tool calls, per choice.
  std::vector<tool_stream> tool_streams;
  std::vector<reasoning_stream> reasoning_streams;
  std::vector<int32_t> tool_calls_sent(choices.size(), 0);
  if (chat)
    for (size_t i = 0; i < choices.size(); ++i) {
      tool_streams.emplace_back(r.tools, limits_.tool_call_parser, r.tool_name);
      if (reasoning_) reasoning_streams.emplace_back(*reasoning_);
    }
  auto pump = [&]() -> asio::awaitable<void> {
    if (chat)
      for (const auto& c : choices) {
        set_usage(int64_t(sub.streams[size_t(c.index / n)]->prompt_ids().size()), 0);
        const std::string chunk = sse_event(chat_role_chunk(h, c.index, usage_null));
        if (!co_await write(chunk)) co_return;
        if (!r.chat_echo.empty()) {
          const std::string echo =
              sse_event(chat_delta_chunk(h, c.index, r.chat_echo, value(), "", usage_null));
          if (!co_await write(echo)) co_return;
        }
      }
    for (size_t p = 0; p < sub.streams.size(); ++p) {
      auto& s = sub.streams[p];
      prompt_tokens += static_cast<int64_t>(s->prompt_ids().size());
      set_usage(int64_t(s->prompt_ids().size()), 0);
      if (!chat && r.echo)
        for (int32_t k = 0; k < n; ++k) {
          auto idx = static_cast<int32_t>(p) * n + k;
          const std::string chunk =
              sse_event(text_chunk(h, idx, s->prompt_text(), value(), {}, usage_null));
          if (!co_await write(chunk)) co_return;
        }
      int32_t cached = 0;
      while (auto ev = co_await s->next()) {
        if (w.client_gone()) continue;  // drain: the engine ends the stream with abort events
        auto& c = choices[p * static_cast<size_t>(n) + static_cast<size_t>(ev->index)];
        if (want_logprobs) learn_texts(*ev);
        c.add(*ev);
        set_usage(int64_t(s->prompt_ids().size()), c.completion_tokens);
        cached = std::max(cached, ev->cached_prompt_tokens);
        if (ev->finish == finish_reason::error) {
          // The choice ends with finish_reason "error", then an error event; [DONE] follows.
          api_error e{500,
                      ev->error_message.empty() ? "engine failure" : ev->error_message,
                      "InternalServerError",
                      {},
                      {}};
          engine_failure = e.message;
          sub.cancel_all();
          const std::string fin_chunk =
              sse_event(chat ? chat_delta_chunk(h, c.index, {}, value(), "error", usage_null)
                             : text_chunk(h, c.index, {}, value(), "error", usage_null));
          if (!co_await write(fin_chunk)) co_return;
          const std::string chunk = sse_event(error_json(e));
          co_await write(chunk);
          co_return;
        }
        value lp;
        if (want_logprobs && !ev->token_ids.empty()) {
          auto& off = text_offsets[static_cast<size_t>(c.index)];
          lp = chat ? chat_logprobs(ev->token_ids, ev->token_logprobs, ev->top_logprobs, name_of)
                    : completion_logprobs(ev->token_ids, ev->token_logprobs, ev->top_logprobs, off,
                                          name_of);
          for (int32_t id : ev->token_ids) off += chars_in(name_of(id));
        }
        std::string_view fin = finish_text(ev->finish);
        bool ok = true;
        // Reasoning first (its text never reaches the tool parser), then tool calls, then content.
        std::string text = ev->text;
        if (chat && reasoning_) {
          reasoning_stream& rs = reasoning_streams[static_cast<size_t>(c.index)];
          reasoning_split part = rs.push(text);
          if (!fin.empty()) {
            reasoning_split rest = rs.finish();
            part.reasoning += rest.reasoning;
            part.content += rest.content;
          }
          if (!part.reasoning.empty()) {
            const std::string chunk =
                sse_event(chat_reasoning_chunk(h, c.index, part.reasoning, usage_null));
            ok = co_await write(chunk);
          }
          text = std::move(part.content);
        }
        std::string content = text;
        tool_stream* ts = chat && r.tools != tool_mode::none
                              ? &tool_streams[static_cast<size_t>(c.index)]
                              : nullptr;
        if (ok && ts) {
          content = ts->push(text);
          if (r.tools == tool_mode::named && !text.empty()) {
            // The output is the named function's arguments: streamed as they come.
            if (!ts->header_sent) {
              ts->header_sent = true;
              tool_calls_sent[static_cast<size_t>(c.index)] = 1;
              const std::string chunk = sse_event(
                  chat_tool_header_chunk(h, c.index, 0, ts->named_id(), r.tool_name, usage_null));
              ok = co_await write(chunk);
            }
            if (ok) {
              const std::string chunk =
                  sse_event(chat_tool_args_chunk(h, c.index, 0, text, usage_null));
              ok = co_await write(chunk);
            }
          }
        }
        if (ok && (!content.empty() || !lp.is_null() || (!chat && !fin.empty()))) {
          // Chat puts finish_reason in a chunk of its own (an empty delta), as OpenAI does.
          const std::string chunk =
              sse_event(chat ? chat_delta_chunk(h, c.index, content, lp, {}, usage_null)
                             : text_chunk(h, c.index, content, lp, fin, usage_null));
          ok = co_await write(chunk);
        }
        if (ok && ts && !fin.empty()) {
          // The whole output parsed once (as a non-streamed response is): held content, then calls.
          tool_stream::final_part last = ts->finish();
          if (!last.content.empty()) {
            const std::string chunk =
                sse_event(chat_delta_chunk(h, c.index, last.content, value(), {}, usage_null));
            ok = co_await write(chunk);
          }
          if (r.tools != tool_mode::named) {
            int32_t k = 0;
            for (const tool_call& call : last.calls) {
              if (!ok) break;
              const std::string head =
                  sse_event(chat_tool_header_chunk(h, c.index, k, call.id, call.name, usage_null));
              ok = co_await write(head);
              if (!ok) break;
              const std::string args =
                  sse_event(chat_tool_args_chunk(h, c.index, k, call.arguments, usage_null));
              ok = co_await write(args);
              ++k;
            }
            tool_calls_sent[static_cast<size_t>(c.index)] = k;
          }
          if (tool_calls_sent[static_cast<size_t>(c.index)] > 0 &&
              ev->finish == finish_reason::stop)
            fin = "tool_calls";
        }
        if (ok && chat && !fin.empty()) {
          const std::string chunk =
              sse_event(chat_delta_chunk(h, c.index, {}, value(), fin, usage_null));
          ok = co_await write(chunk);
        }
        if (!ok) sub.cancel_all();
      }
      cached_tokens += cached;
    }
    if (r.include_usage) {
      int64_t completion_tokens = 0;
      for (const auto& c : choices) completion_tokens += c.completion_tokens;
      const std::string chunk =
          sse_event(usage_chunk(h, usage_json(prompt_tokens, completion_tokens, cached_tokens)));
      co_await write(chunk);
    }
    co_await wait_writer();  // a keep-alive comment being written finishes before the next write
  };
  co_await (pump() || watch() || keepalive());
  if (w.client_gone()) co_return;
  co_await w.write_chunk(k_sse_done);  // after an error event too: clients stop reading here
  co_await w.end_stream();
}

}  // namespace coserve::http
