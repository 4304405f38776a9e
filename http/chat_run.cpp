// The chat run /v1/responses and /v1/messages share: a dialect request translated, validated and
// submitted (start_dialect), its one sample's output split into reasoning, content and tool calls
// as it streams (drain_chat, the same parsers as /v1/chat/completions), with the client watched
// (pump_chat) or collected whole (collect_chat); and the input-token count of either dialect's
// request (count_input_tokens).
#include <asio/experimental/awaitable_operators.hpp>
#include <chrono>
#include <functional>

#include "http/dialects.hpp"
#include "http/openai_api.hpp"
#include "http/reasoning.hpp"
#include "http/tool_calls.hpp"

namespace coserve::http {

using namespace asio::experimental::awaitable_operators;
using json::value;

asio::awaitable<openai_api::chat_outcome> openai_api::drain_chat(request_stream& s,
                                                                 const openai_request& r,
                                                                 const chat_sink& sink) {
  chat_outcome out;
  out.prompt_tokens = static_cast<int64_t>(s.prompt_ids().size());
  std::optional<reasoning_stream> rs;
  if (reasoning_) rs.emplace(*reasoning_);
  tool_stream ts(r.tools, limits_.tool_call_parser, r.tool_name);
  bool ok = true;
  while (auto ev = co_await s.next()) {
    out.completion_tokens = ev->completion_tokens;
    out.cached_tokens = std::max<int64_t>(out.cached_tokens, ev->cached_prompt_tokens);
    if (!ok) continue;  // the client is gone: drain (the engine ends the stream)
    if (ev->finish == finish_reason::error) {
      out.error = ev->error_message.empty() ? "engine failure" : ev->error_message;
      out.finish = finish_reason::error;
      continue;
    }
    const bool last = ev->finish != finish_reason::none;
    std::string text = ev->text;
    if (rs) {
      reasoning_split part = rs->push(text);
      if (last) {
        reasoning_split rest = rs->finish();
        part.reasoning += rest.reasoning;
        part.content += rest.content;
      }
      if (!part.reasoning.empty()) ok = co_await sink.reasoning(part.reasoning);
      text = std::move(part.content);
    }
    std::string content = ts.push(text);
    if (ok && !content.empty()) ok = co_await sink.content(content);
    if (ok && last) {
      tool_stream::final_part fin = ts.finish();
      if (!fin.content.empty()) ok = co_await sink.content(fin.content);
      for (const tool_call& c : fin.calls) {
        if (!ok) break;
        ok = co_await sink.call(c);
      }
      out.tool_calls = !fin.calls.empty();
      out.finish = ev->finish;
      out.stop_reason = ev->stop_reason;
    }
    if (!ok) s.cancel();
  }
  co_return out;
}

std::variant<openai_request, api_error> openai_api::parse_dialect(
    const value& body, const dialect_rules& rules) const {
  auto chat = rules.translate(body);
  if (auto* e = std::get_if<api_error>(&chat)) return *e;
  if (const value* m = body.find("model"); m && m->is_string()) std::get<value>(chat)["model"] = *m;
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
  if (const value* mt = body.find("max_tokens"); anthropic && (!mt || mt->is_null()))
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

asio::awaitable<openai_api::collected_chat> openai_api::collect_chat(dialect_run& run,
                                                                     response_writer& w) {
  collected_chat out;
  chat_sink sink;
  sink.reasoning = [&](const std::string& t) -> asio::awaitable<bool> {
    out.reasoning += t;
    co_return true;
  };
  sink.content = [&](const std::string& t) -> asio::awaitable<bool> {
    out.text += t;
    co_return true;
  };
  sink.call = [&](const tool_call& c) -> asio::awaitable<bool> {
    out.calls.push_back(c);
    co_return true;
  };
  out.outcome = co_await pump_chat(run, sink, w);
  co_return out;
}

asio::awaitable<openai_api::chat_outcome> openai_api::pump_chat(dialect_run& run,
                                                                const chat_sink& sink,
                                                                response_writer& w) {
  chat_outcome o;
  auto go = [&]() -> asio::awaitable<void> { o = co_await drain_chat(*run.s, run.r, sink); };
  auto watch = [&]() -> asio::awaitable<void> {
    if (co_await w.wait_disconnect()) run.s->cancel();
  };
  co_await (go() || watch());
  co_return o;
}

}  // namespace coserve::http
