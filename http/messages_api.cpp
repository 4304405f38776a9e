// POST /v1/messages (Anthropic Messages API): the translated chat request's output as a message
// with thinking, text and tool_use blocks, or as message_* / content_block_* events; errors in
// Anthropic's shape.
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

asio::awaitable<void> openai_api::messages(http_request& req, response_writer& w) {
  auto fail = [&](const api_error& e) -> asio::awaitable<void> {
    co_await respond_anthropic_error(w, e);
  };
  const dialect_rules rules{messages_to_chat, messages_param, "messages", "max_tokens"};
  auto started = co_await start_dialect(req.body, rules);
  if (auto* e = std::get_if<api_error>(&started)) {
    const api_error err = *e;
    co_return co_await fail(err);
  }
  dialect_run& run = std::get<dialect_run>(started);
  const openai_request& r = run.r;
  std::shared_ptr<request_stream> s = run.s;
  const std::string id = new_id("msg");
  auto stop_reason = [](const chat_outcome& o) -> value {
    if (o.tool_calls && o.finish == finish_reason::stop) return value("tool_use");
    if (o.finish == finish_reason::length) return value("max_tokens");
    if (!o.stop_reason.empty()) return value("stop_sequence");
    return value("end_turn");
  };
  auto tool_use_block = [](const tool_call& c) {
    value b = json::object{};
    b["type"] = value("tool_use");
    b["id"] = value("toolu_" + c.id.substr(c.id.rfind('-') + 1));
    b["name"] = value(c.name);
    auto input = json::parse(c.arguments);
    b["input"] = input && input->is_object() ? *input : value(json::object{});
    return b;
  };

  if (!r.stream) {
    collected_chat got = co_await collect_chat(run, w);
    if (w.client_gone()) co_return;
    const chat_outcome& o = got.outcome;
    const std::string& thinking = got.reasoning;
    const std::string& text = got.text;
    const std::vector<tool_call>& calls = got.calls;
    if (!o.error.empty()) {
      const api_error err{500, o.error, "InternalServerError", {}, {}};
      co_return co_await fail(err);
    }
    value content = json::array{};
    if (!thinking.empty()) {
      value b = json::object{};
      b["type"] = value("thinking");
      b["thinking"] = value(thinking);
      b["signature"] = value("");
      content.push_back(std::move(b));
    }
    if (!text.empty() || calls.empty()) {
      value b = json::object{};
      b["type"] = value("text");
      b["text"] = value(text);
      content.push_back(std::move(b));
    }
    for (const auto& c : calls) content.push_back(tool_use_block(c));
    value v = json::object{};
    v["id"] = value(id);
    v["type"] = value("message");
    v["role"] = value("assistant");
    v["model"] = value(r.model.empty() ? limits_.served_model_name : r.model);
    v["content"] = std::move(content);
    v["stop_reason"] = stop_reason(o);
    v["stop_sequence"] = o.stop_reason.empty() ? value() : value(o.stop_reason);
    value usage = json::object{};
    usage["input_tokens"] = value(o.prompt_tokens);
    usage["output_tokens"] = value(o.completion_tokens);
    usage["cache_read_input_tokens"] = value(o.cached_tokens);
    v["usage"] = std::move(usage);
    std::string out;
    json::dump_compact(v, out);
    co_return co_await respond_json(w, 200, out);
  }

  metrics_.count_http(200);
  if (!co_await w.begin_stream(200, "text/event-stream")) {
    s->cancel();
    co_return;
  }
  auto event = [&](const char* type, value data) -> asio::awaitable<bool> {
    data["type"] = value(type);
    const std::string chunk = sse_named_event(type, data);
    co_return co_await w.write_chunk(chunk);
  };
  value start = json::object{};
  {
    value m = json::object{};
    m["id"] = value(id);
    m["type"] = value("message");
    m["role"] = value("assistant");
    m["model"] = value(r.model.empty() ? limits_.served_model_name : r.model);
    m["content"] = json::array{};
    m["stop_reason"] = value();
    m["stop_sequence"] = value();
    value usage = json::object{};
    usage["input_tokens"] = value(static_cast<int64_t>(s->prompt_ids().size()));
    usage["output_tokens"] = value(int64_t{0});
    m["usage"] = std::move(usage);
    start["message"] = std::move(m);
  }
  bool ok = co_await event("message_start", std::move(start));
  // Content blocks: one open at a time (thinking, text, then tool_use blocks).
  int64_t index = -1;
  std::string open;  // type of the open block, "" when none
  auto close_block = [&]() -> asio::awaitable<bool> {
    if (open.empty()) co_return true;
    value d = json::object{};
    d["index"] = value(index);
    open.clear();
    co_return co_await event("content_block_stop", std::move(d));
  };
  auto open_block = [&](const char* type, value block) -> asio::awaitable<bool> {
    if (open == type) co_return true;
    if (!co_await close_block()) co_return false;
    ++index;
    open = type;
    value d = json::object{};
    d["index"] = value(index);
    d["content_block"] = std::move(block);
    co_return co_await event("content_block_start", std::move(d));
  };
  auto delta = [&](value dl) -> asio::awaitable<bool> {
    value d = json::object{};
    d["index"] = value(index);
    d["delta"] = std::move(dl);
    co_return co_await event("content_block_delta", std::move(d));
  };
  chat_sink sink;
  sink.reasoning = [&](const std::string& t) -> asio::awaitable<bool> {
    value b = json::object{};
    b["type"] = value("thinking");
    b["thinking"] = value("");
    b["signature"] = value("");
    if (!co_await open_block("thinking", std::move(b))) co_return false;
    value dl = json::object{};
    dl["type"] = value("thinking_delta");
    dl["thinking"] = value(t);
    co_return co_await delta(std::move(dl));
  };
  sink.content = [&](const std::string& t) -> asio::awaitable<bool> {
    value b = json::object{};
    b["type"] = value("text");
    b["text"] = value("");
    if (!co_await open_block("text", std::move(b))) co_return false;
    value dl = json::object{};
    dl["type"] = value("text_delta");
    dl["text"] = value(t);
    co_return co_await delta(std::move(dl));
  };
  sink.call = [&](const tool_call& c) -> asio::awaitable<bool> {
    if (!co_await close_block()) co_return false;
    value b = tool_use_block(c);
    b["input"] = json::object{};
    if (!co_await open_block("tool_use", std::move(b))) co_return false;
    value dl = json::object{};
    dl["type"] = value("input_json_delta");
    dl["partial_json"] = value(c.arguments);
    if (!co_await delta(std::move(dl))) co_return false;
    co_return co_await close_block();
  };
  chat_outcome o;
  if (ok)
    o = co_await pump_chat(run, sink, w);
  else
    s->cancel();
  if (w.client_gone()) co_return;
  if (!o.error.empty()) {
    value d = json::object{};
    value err = json::object{};
    err["type"] = value("api_error");
    err["message"] = value(o.error);
    d["error"] = std::move(err);
    co_await event("error", std::move(d));
  } else {
    if (index < 0) {  // no output at all: an empty text block, as Anthropic sends
      value b = json::object{};
      b["type"] = value("text");
      b["text"] = value("");
      ok = co_await open_block("text", std::move(b));
    }
    ok = ok && co_await close_block();
    value md = json::object{};
    value dl = json::object{};
    dl["stop_reason"] = stop_reason(o);
    dl["stop_sequence"] = o.stop_reason.empty() ? value() : value(o.stop_reason);
    md["delta"] = std::move(dl);
    value usage = json::object{};
    usage["output_tokens"] = value(o.completion_tokens);
    md["usage"] = std::move(usage);
    ok = ok && co_await event("message_delta", std::move(md));
    if (ok) co_await event("message_stop", value(json::object{}));
  }
  co_await w.end_stream();
}

}  // namespace coserve::http
