// The chat run /v1/responses and /v1/messages share: a dialect request translated, validated and
// submitted (start_dialect), its one sample handed on as reasoning, content and tool calls
// (dialect_sink, over the split every chat answer uses), and the input-token count of either
// dialect's request (count_input_tokens).
#include "http/chat_run.hpp"

#include <algorithm>

#include "http/dialects.hpp"
#include "http/openai_api.hpp"
#include "http/request_fields.hpp"

namespace coserve::http {

using json::value;

void dialect_sink::count(const output_event& ev) {
  outcome_.completion_tokens = ev.completion_tokens;
  outcome_.cached_tokens = std::max<int64_t>(outcome_.cached_tokens, ev.cached_prompt_tokens);
}

asio::awaitable<bool> dialect_sink::prompt_begins(size_t, request_stream& s) {
  outcome_.prompt_tokens = static_cast<int64_t>(s.prompt_ids().size());
  co_return true;
}

asio::awaitable<bool> dialect_sink::event(const choice_event& e) {
  count(e.ev);
  const output_part& part = e.part;
  if (!part.reasoning.empty() && !co_await reasoning(part.reasoning)) co_return false;
  if (!part.content.empty() && !co_await content(part.content)) co_return false;
  if (!e.last) co_return true;
  if (!part.held_content.empty() && !co_await content(part.held_content)) co_return false;
  for (const tool_call& c : part.calls)
    if (!co_await call(c)) co_return false;
  outcome_.tool_calls = !part.calls.empty();
  outcome_.finish = e.ev.finish;
  outcome_.stop_reason = e.ev.stop_reason;
  co_return true;
}

asio::awaitable<void> dialect_sink::failure(const choice_event& e, const std::string& message) {
  count(e.ev);
  outcome_.error = message;
  outcome_.finish = finish_reason::error;
  co_await failed(message);
}

std::variant<openai_request, api_error> openai_api::parse_dialect(
    const value& body, const dialect_rules& rules) const {
  auto chat = rules.translate(body);
  if (auto* e = std::get_if<api_error>(&chat)) return *e;
  if (const value* m = find_field(body, "model"); m && m->is_string())
    std::get<value>(chat)["model"] = *m;
  auto pr = parse_openai_request(json::dump(std::get<value>(chat)), true, limits_);
  if (auto* e = std::get_if<api_error>(&pr)) e->param = rules.param(e->param);
  return pr;
}

asio::awaitable<void> openai_api::respond_anthropic_error(response_writer& w, const api_error& e) {
  http_response resp{e.status, "application/json", anthropic_error_json(e), {}};
  if (e.status == 429) resp.headers.emplace_back("Retry-After", "1");
  co_await respond(w, resp);
}

asio::awaitable<std::variant<openai_api::dialect_run, api_error>> openai_api::start_dialect(
    const std::string& body_text, const dialect_rules& rules) {
  auto parsed = parse_json_object(body_text);
  if (auto* e = std::get_if<api_error>(&parsed)) co_return *e;
  const value& body = std::get<value>(parsed);
  auto pr = parse_dialect(body, rules);
  if (auto* e = std::get_if<api_error>(&pr)) co_return *e;
  dialect_run run{body, std::move(std::get<openai_request>(pr)), nullptr};
  generate_request g;
  g.input = run.r.chat_in;
  g.add_special_tokens = false;
  g.params = run.r.params;
  g.structured = run.r.structured;
  g.context = context_of(run.r);
  g.context.input_param = rules.input_param;
  if (!run.r.max_tokens_given || run.r.max_tokens_param == "max_tokens")
    g.context.max_tokens_param = rules.max_tokens_param;
  auto submitted = co_await eng().submit(std::move(g));
  if (!submitted) {
    api_error err = from_engine_error(submitted.err(), rules.input_param);
    err.param = rules.param(err.param);
    co_return err;
  }
  run.s = std::move(*submitted);
  co_return run;
}

asio::awaitable<void> openai_api::count_input_tokens(http_request& req, response_writer& w,
                                                     bool anthropic) {
  auto fail = [&](const api_error& e) -> asio::awaitable<void> {
    if (anthropic) co_return co_await respond_anthropic_error(w, e);
    co_await respond_error(w, e);
  };
  auto parsed = parse_json_object(req.body);
  if (auto* e = std::get_if<api_error>(&parsed)) {
    const api_error err = *e;
    co_return co_await fail(err);
  }
  value body = std::move(std::get<value>(parsed));
  // Nothing is generated: Anthropic's count body has no max_tokens, which the translation needs,
  // and a stream flag changes nothing.
  if (const value* mt = find_field(body, "max_tokens"); anthropic && (!mt || mt->is_null()))
    body["max_tokens"] = value(int64_t{1});
  body["stream"] = value(false);
  const dialect_rules rules =
      anthropic ? dialect_rules{messages_to_chat, messages_param, "messages", "max_tokens"}
                : dialect_rules{responses_to_chat, responses_param, "input", "max_output_tokens"};
  auto pr = parse_dialect(body, rules);
  if (auto* e = std::get_if<api_error>(&pr)) {
    const api_error err = *e;
    co_return co_await fail(err);
  }
  tokenize_request_input in;
  in.input = std::move(std::get<openai_request>(pr).chat_in);
  auto ids = co_await eng().tokenize(std::move(in));
  if (!ids) {
    const api_error err =
        from_engine_error(ids.err(), rules.input_param,
                          ids.err().code != "queue_full" && ids.err().code != "engine_down");
    co_return co_await fail(err);
  }
  value out = json::object{};
  if (!anthropic) out["object"] = value("response.input_tokens");
  out["input_tokens"] = value(static_cast<int64_t>(ids->size()));
  std::string text;
  json::dump_compact(out, text);
  co_await respond_json(w, 200, text);
}

}  // namespace coserve::http
