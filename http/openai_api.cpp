// The router (routes from http/routes.cpp) and the small routes' handlers: models, health,
// version, metrics, the OpenAPI document, tokenize / detokenize and the web UI's. The generating
// routes are http/completions_api.cpp, http/responses_api.cpp and http/messages_api.cpp.
#include "http/openai_api.hpp"

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "http/openapi.hpp"
#include "http/request_fields.hpp"
#include "http/routes.hpp"
#include "http/webui.hpp"
#include "runtime/trace.hpp"

namespace coserve::http {

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

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

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
  metrics_.describe(info);
  limits_.served_model_aliases = info.served_model_aliases;
  for (const lora_module& m : info.lora_modules) limits_.lora_names.push_back(m.name);
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
  if (co_await answer_cors(req, w)) co_return;
  if (options_.webui && req.method == "GET") {
    if (const struct web_asset* a = find_web_asset(path)) co_return co_await web_asset(req, w, *a);
  }
  std::optional<std::string> model_id;
  const route* found = find_route(path, options_.webui, model_id);
  if (!found) {
    const api_error err = api_error::not_found("route " + path + " not found");
    co_return co_await respond_error(w, err);
  }
  if (req.method != found->method) {
    const api_error e{
        405, "method " + req.method + " not allowed on " + path, "MethodNotAllowed", {}, {}};
    http_response r = error_response(e);
    r.headers.emplace_back("Allow",
                           found->method == "GET" ? "GET, HEAD" : std::string(found->method));
    co_return co_await respond(w, r);
  }
  if (!authorized(req, path)) {
    const api_error err = {
        401, "invalid or missing API key", "AuthenticationError", {}, "invalid_api_key"};
    co_return co_await respond_error(w, err);
  }
  co_await serve(*found, req, w, model_id);
}

// CORS: a preflight is answered here, before routing and the API key (browsers send no key with
// it); every other answer to a request with an Origin carries the policy's headers.
asio::awaitable<bool> openai_api::answer_cors(http_request& req, response_writer& w) {
  const std::string origin = req.header("origin");
  if (origin.empty()) co_return false;
  cors_answer c =
      cors_for(options_.cors, req.method, origin, req.header("access-control-request-method"),
               req.header("access-control-request-headers"), !req.header("cookie").empty());
  for (auto& [name, value] : c.headers) w.add_header(std::move(name), std::move(value));
  if (c.preflight_status == 0) co_return false;
  http_response r{c.preflight_status,
                  "text/plain; charset=utf-8",
                  c.preflight_status == 200 ? "OK" : c.failure,
                  {}};
  co_await respond(w, r);
  co_return true;
}

// The key as OpenAI clients send it (Authorization: Bearer) or as Anthropic's do (X-Api-Key).
// The web UI's data (/api/*: requests, traffic, traces) needs it too; its static files do not.
bool openai_api::authorized(http_request& req, const std::string& path) const {
  return options_.api_key.empty() || !needs_api_key(path) ||
         req.header("authorization") == "Bearer " + options_.api_key ||
         req.header("x-api-key") == options_.api_key;
}

// The route's handler, after the answers that do not depend on it (version, loading, health,
// draining).
asio::awaitable<void> openai_api::serve(const route& rt, http_request& req, response_writer& w,
                                        const std::optional<std::string>& model_id) {
  if (rt.id == route_id::version) co_return co_await version(w);
  if (engine_.load(std::memory_order_acquire) == nullptr)  // still loading the model
    co_return co_await answer_loading(rt, w);
  if (rt.id == route_id::health) co_return co_await health(w);
  if (rt.generates && draining_.load(std::memory_order_acquire)) {
    const api_error e{503, "the server is shutting down", "ServiceUnavailableError", {}, {}};
    co_return co_await respond_error(w, e);
  }
  switch (rt.id) {
    case route_id::completions:
      co_return co_await generate(req, w, false);
    case route_id::chat_completions:
      co_return co_await generate(req, w, true);
    case route_id::responses:
      co_return co_await responses(req, w);
    case route_id::messages:
      co_return co_await messages(req, w);
    case route_id::messages_count_tokens:
      co_return co_await count_input_tokens(req, w, true);
    case route_id::responses_input_tokens:
      co_return co_await count_input_tokens(req, w, false);
    case route_id::api_status:
      co_return co_await status(req, w);
    case route_id::api_trace:
      co_return co_await trace(req, w);
    case route_id::api_prefix_cache:
      co_return co_await prefix_cache(w);
    case route_id::reset_prefix_cache:
      co_return co_await reset_prefix_cache(w);
    case route_id::embeddings:
      co_return co_await embeddings(req, w);
    case route_id::score:
      co_return co_await score(req, w);
    case route_id::rerank:
      co_return co_await rerank(req, w);
    case route_id::tokenize:
      co_return co_await tokenize(req, w);
    case route_id::detokenize:
      co_return co_await detokenize(req, w);
    case route_id::metrics: {
      http_response r{200, "text/plain; version=0.0.4; charset=utf-8", metrics_.scrape(eng()), {}};
      co_return co_await respond(w, r);
    }
    case route_id::openapi: {
      std::string body = openapi_json(limits_, options_.version, options_.webui);
      co_return co_await respond_json(w, 200, body);
    }
    case route_id::models:
    case route_id::model:
      co_return co_await models(w, model_id);
    case route_id::version:
    case route_id::health:
      break;  // answered above
  }
}

asio::awaitable<void> openai_api::version(response_writer& w) {
  value v = json::object{};
  v["version"] = value(options_.version);
  std::string body;
  json::dump_compact(v, body);
  co_await respond_json(w, 200, body);
}

asio::awaitable<void> openai_api::answer_loading(const route& rt, response_writer& w) {
  if (rt.id == route_id::health) {
    std::string body = R"({"status":"loading"})";
    co_return co_await respond_json(w, 503, body);
  }
  const api_error e{
      503, "the model is still loading; retry later", "ServiceUnavailableError", {}, {}};
  co_await respond_error(w, e);
}

asio::awaitable<void> openai_api::health(response_writer& w) {
  const bool draining = draining_.load(std::memory_order_acquire);
  std::string reason = draining ? "the server is shutting down" : eng().unhealthy_reason();
  value v = json::object{};
  if (!reason.empty()) {
    v["status"] = value(draining ? "draining" : "unhealthy");
    v["reason"] = value(std::move(reason));
  }
  std::string body;
  json::dump_compact(v, body);
  co_await respond_json(w, v.as_object().empty() ? 200 : 503, body);
}

// /v1/models (one entry per served name, as vLLM lists them) and /v1/models/{model}.
asio::awaitable<void> openai_api::models(response_writer& w,
                                         const std::optional<std::string>& model_id) {
  const auto& info = eng().info();
  if (model_id && !limits_.serves(*model_id)) {
    const api_error e{404, "The model `" + *model_id + "` does not exist.", "NotFoundError",
                      "model", "model_not_found"};
    co_return co_await respond_error(w, e);
  }
  auto card = [&](const std::string& id) {
    value m = json::object{};
    m["id"] = value(id);
    m["object"] = value("model");
    m["created"] = value(info.created);
    m["owned_by"] = value("coserve");
    m["root"] = value(info.served_model_name);
    m["max_model_len"] = value(int64_t{info.max_model_len});
    // An adapter's card, as vLLM lists one: its folder as root, the base model as parent.
    if (const int32_t lora = limits_.lora_id(id); lora != 0) {
      m["root"] = value(info.lora_modules[size_t(lora - 1)].path);
      m["parent"] = value(info.served_model_name);
    } else {
      m["parent"] = value();
    }
    return m;
  };
  std::string body;
  if (model_id) {
    json::dump_compact(card(*model_id), body);
    co_return co_await respond_json(w, 200, body);
  }
  value list = json::object{};
  list["object"] = value("list");
  list["data"] = json::array{};
  list["data"].push_back(card(info.served_model_name));
  for (const std::string& alias : info.served_model_aliases) list["data"].push_back(card(alias));
  for (const lora_module& m : info.lora_modules) list["data"].push_back(card(m.name));
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

namespace {
api_error prefix_cache_error(const error& e) {
  return e.code == "unsupported" ? api_error::not_found(e.message) : from_engine_error(e, "");
}
}  // namespace

// Hashes are 64-bit unsigned: written as JSON integers (beyond a double's 53 bits; Python's
// json and msgpack read them exactly).
asio::awaitable<void> openai_api::prefix_cache(response_writer& w) {
  auto listing = co_await eng().prefix_cache();
  if (!listing) co_return co_await respond_error(w, prefix_cache_error(listing.err()));
  std::string body = "{\"block_size\":" + std::to_string(listing->block_size) +
                     ",\"num_blocks\":" + std::to_string(listing->num_blocks) + ",\"blocks\":[";
  for (size_t i = 0; i < listing->blocks.size(); ++i) {
    const auto& b = listing->blocks[i];
    body += (i ? ",{\"block\":" : "{\"block\":") + std::to_string(b.block) +
            ",\"hash\":" + std::to_string(b.hash) + ",\"parent\":" + std::to_string(b.parent) +
            ",\"ref_count\":" + std::to_string(b.ref_count) + "}";
  }
  body += "]}";
  http_response r{200, "application/json", std::move(body), {}};
  r.headers.emplace_back("Cache-Control", "no-store");
  co_await respond(w, r);
}

asio::awaitable<void> openai_api::reset_prefix_cache(response_writer& w) {
  auto dropped = co_await eng().reset_prefix_cache();
  if (!dropped) co_return co_await respond_error(w, prefix_cache_error(dropped.err()));
  std::string body = "{\"dropped_blocks\":" + std::to_string(*dropped) + "}";
  co_await respond_json(w, 200, body);
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
  if (const value* m = find_field(body, "messages"); m && !m->is_null()) {
    param = "messages";
    auto r = parse_openai_request(req.body, true, limits_);
    if (auto* e = std::get_if<api_error>(&r)) {
      const api_error err_ = *e;
      co_return co_await respond_error(w, err_);
    }
    tokenize_request_input in;
    in.input = std::move(std::get<openai_request>(r).chat_in);
    ids = co_await eng().tokenize(std::move(in));
  } else if (const value* p = find_field(body, "prompt"); p && !p->is_null()) {
    if (!p->is_string()) {
      const api_error err_ = api_error::bad_request("'prompt' must be a string", "prompt");
      co_return co_await respond_error(w, err_);
    }
    bool add_special = true;
    if (const value* a = find_field(body, "add_special_tokens"); a && !a->is_null()) {
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
  const value* t = find_field(body, "tokens");
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

}  // namespace coserve::http
