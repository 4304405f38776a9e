// POST /v1/responses (OpenAI Responses API): the translated chat request's output as a response
// object with reasoning, message and function_call items, or as response.* events.
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

namespace {

int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

asio::awaitable<void> openai_api::responses(http_request& req, response_writer& w) {
  const dialect_rules rules{responses_to_chat, responses_param, "input", "max_output_tokens"};
  auto started = co_await start_dialect(req.body, rules);
  if (auto* e = std::get_if<api_error>(&started)) {
    const api_error err = *e;
    co_return co_await respond_error(w, err);
  }
  dialect_run& run = std::get<dialect_run>(started);
  const value& body = run.body;
  const openai_request& r = run.r;
  std::shared_ptr<request_stream> s = run.s;

  const std::string id = new_id("resp");
  const int64_t created = now_seconds();
  int64_t seq = 0;
  // The response object, as the client's Response model reads it.
  auto response_obj = [&](const char* status, const value& output, const value& usage) {
    value v = json::object{};
    v["id"] = value(id);
    v["object"] = value("response");
    v["created_at"] = value(created);
    v["status"] = value(status);
    v["model"] = value(r.model.empty() ? limits_.served_model_name : r.model);
    v["output"] = output;
    v["parallel_tool_calls"] = value(r.parallel_tool_calls);
    v["tool_choice"] = body.find("tool_choice") && !body.find("tool_choice")->is_null()
                           ? *body.find("tool_choice")
                           : value("auto");
    v["tools"] = body.find("tools") && body.find("tools")->is_array() ? *body.find("tools")
                                                                      : value(json::array{});
    v["temperature"] = value(double(r.params.temperature));
    v["top_p"] = value(double(r.params.top_p));
    v["max_output_tokens"] = r.max_tokens_given ? value(int64_t{r.params.max_tokens}) : value();
    v["instructions"] = body.find("instructions") ? *body.find("instructions") : value();
    v["metadata"] = body.find("metadata") && body.find("metadata")->is_object()
                        ? *body.find("metadata")
                        : value(json::object{});
    v["error"] = value();
    v["incomplete_details"] = value();
    if (std::string_view(status) == "incomplete") {
      value d = json::object{};
      d["reason"] = value("max_output_tokens");
      v["incomplete_details"] = std::move(d);
    }
    v["usage"] = usage;
    return v;
  };
  auto usage_of = [](const chat_outcome& o) {
    value u = json::object{};
    u["input_tokens"] = value(o.prompt_tokens);
    value ind = json::object{};
    ind["cached_tokens"] = value(o.cached_tokens);
    u["input_tokens_details"] = std::move(ind);
    u["output_tokens"] = value(o.completion_tokens);
    value outd = json::object{};
    outd["reasoning_tokens"] = value(int64_t{0});
    u["output_tokens_details"] = std::move(outd);
    u["total_tokens"] = value(o.prompt_tokens + o.completion_tokens);
    return u;
  };
  // Output items, built as the output streams: reasoning, then the message, then function calls.
  value output = json::array{};
  std::string reasoning_text, message_text;
  int64_t reasoning_index = -1, message_index = -1;
  const std::string reasoning_id = new_id("rs"), message_id = new_id("msg");
  auto message_item = [&](const char* status) {
    value part = json::object{};
    part["type"] = value("output_text");
    part["text"] = value(message_text);
    part["annotations"] = json::array{};
    value item = json::object{};
    item["id"] = value(message_id);
    item["type"] = value("message");
    item["status"] = value(status);
    item["role"] = value("assistant");
    item["content"] = json::array{std::move(part)};
    return item;
  };
  auto reasoning_item = [&]() {
    value part = json::object{};
    part["type"] = value("reasoning_text");
    part["text"] = value(reasoning_text);
    value item = json::object{};
    item["id"] = value(reasoning_id);
    item["type"] = value("reasoning");
    item["summary"] = json::array{};
    item["content"] = json::array{std::move(part)};
    return item;
  };
  auto call_item = [&](const tool_call& c, const char* status) {
    value item = json::object{};
    item["id"] = value("fc_" + c.id.substr(c.id.rfind('-') + 1));
    item["type"] = value("function_call");
    item["call_id"] = value(c.id);
    item["name"] = value(c.name);
    item["arguments"] = value(c.arguments);
    item["status"] = value(status);
    return item;
  };

  if (!r.stream) {
    collected_chat got = co_await collect_chat(run, w);
    if (w.client_gone()) co_return;
    const chat_outcome& o = got.outcome;
    const std::vector<tool_call>& calls = got.calls;
    reasoning_text = got.reasoning;
    message_text = got.text;
    if (!o.error.empty()) {
      const api_error err{500, o.error, "InternalServerError", {}, {}};
      co_return co_await respond_error(w, err);
    }
    if (!reasoning_text.empty()) output.push_back(reasoning_item());
    if (!message_text.empty() || calls.empty()) output.push_back(message_item("completed"));
    for (const auto& c : calls) output.push_back(call_item(c, "completed"));
    const char* status = o.finish == finish_reason::length ? "incomplete" : "completed";
    std::string out;
    json::dump_compact(response_obj(status, output, usage_of(o)), out);
    co_return co_await respond_json(w, 200, out);
  }

  metrics_.count_http(200);
  if (!co_await w.begin_stream(200, "text/event-stream")) {
    s->cancel();
    co_return;
  }
  auto event = [&](const char* type, value data) -> asio::awaitable<bool> {
    data["type"] = value(type);
    data["sequence_number"] = value(seq++);
    const std::string chunk = sse_named_event(type, data);
    co_return co_await w.write_chunk(chunk);
  };
  auto with_response = [&](const char* status, const value& usage) {
    value d = json::object{};
    d["response"] = response_obj(status, output, usage);
    return d;
  };
  const value null_usage;
  bool ok = co_await event("response.created", with_response("in_progress", null_usage));
  ok = ok && co_await event("response.in_progress", with_response("in_progress", null_usage));
  int64_t next_index = 0;
  auto item_added = [&](value item, int64_t index) -> asio::awaitable<bool> {
    value d = json::object{};
    d["output_index"] = value(index);
    d["item"] = std::move(item);
    co_return co_await event("response.output_item.added", std::move(d));
  };
  auto close_reasoning = [&]() -> asio::awaitable<bool> {
    if (reasoning_index < 0) co_return true;
    value d = json::object{};
    d["item_id"] = value(reasoning_id);
    d["output_index"] = value(reasoning_index);
    d["content_index"] = value(int64_t{0});
    d["text"] = value(reasoning_text);
    bool good = co_await event("response.reasoning_text.done", std::move(d));
    value item = reasoning_item();
    output.push_back(item);
    value e = json::object{};
    e["output_index"] = value(reasoning_index);
    e["item"] = std::move(item);
    good = good && co_await event("response.output_item.done", std::move(e));
    reasoning_index = -2;  // closed
    co_return good;
  };
  auto open_message = [&]() -> asio::awaitable<bool> {
    if (message_index >= 0) co_return true;
    if (!co_await close_reasoning()) co_return false;
    message_index = next_index++;
    if (!co_await item_added(message_item("in_progress"), message_index)) co_return false;
    value part = json::object{};
    part["type"] = value("output_text");
    part["text"] = value("");
    part["annotations"] = json::array{};
    value d = json::object{};
    d["item_id"] = value(message_id);
    d["output_index"] = value(message_index);
    d["content_index"] = value(int64_t{0});
    d["part"] = std::move(part);
    co_return co_await event("response.content_part.added", std::move(d));
  };
  auto close_message = [&]() -> asio::awaitable<bool> {
    if (message_index < 0) co_return true;
    value d = json::object{};
    d["item_id"] = value(message_id);
    d["output_index"] = value(message_index);
    d["content_index"] = value(int64_t{0});
    d["text"] = value(message_text);
    d["logprobs"] = json::array{};
    bool good = co_await event("response.output_text.done", std::move(d));
    value part = json::object{};
    part["type"] = value("output_text");
    part["text"] = value(message_text);
    part["annotations"] = json::array{};
    value pd = json::object{};
    pd["item_id"] = value(message_id);
    pd["output_index"] = value(message_index);
    pd["content_index"] = value(int64_t{0});
    pd["part"] = std::move(part);
    good = good && co_await event("response.content_part.done", std::move(pd));
    value item = message_item("completed");
    output.push_back(item);
    value e = json::object{};
    e["output_index"] = value(message_index);
    e["item"] = std::move(item);
    good = good && co_await event("response.output_item.done", std::move(e));
    message_index = -2;
    co_return good;
  };
  chat_sink sink;
  sink.reasoning = [&](const std::string& t) -> asio::awaitable<bool> {
    if (reasoning_index == -1) {
      reasoning_index = next_index++;
      value item = reasoning_item();
      item["content"] = json::array{};
      if (!co_await item_added(std::move(item), reasoning_index)) co_return false;
    }
    reasoning_text += t;
    value d = json::object{};
    d["item_id"] = value(reasoning_id);
    d["output_index"] = value(reasoning_index);
    d["content_index"] = value(int64_t{0});
    d["delta"] = value(t);
    co_return co_await event("response.reasoning_text.delta", std::move(d));
  };
  sink.content = [&](const std::string& t) -> asio::awaitable<bool> {
    if (!co_await open_message()) co_return false;
    message_text += t;
    value d = json::object{};
    d["item_id"] = value(message_id);
    d["output_index"] = value(message_index);
    d["content_index"] = value(int64_t{0});
    d["delta"] = value(t);
    d["logprobs"] = json::array{};
    co_return co_await event("response.output_text.delta", std::move(d));
  };
  sink.call = [&](const tool_call& c) -> asio::awaitable<bool> {
    if (!co_await close_reasoning() || !co_await close_message()) co_return false;
    const int64_t index = next_index++;
    value item = call_item(c, "in_progress");
    item["arguments"] = value("");
    if (!co_await item_added(std::move(item), index)) co_return false;
    const std::string item_id = "fc_" + c.id.substr(c.id.rfind('-') + 1);
    value d = json::object{};
    d["item_id"] = value(item_id);
    d["output_index"] = value(index);
    d["delta"] = value(c.arguments);
    if (!co_await event("response.function_call_arguments.delta", std::move(d))) co_return false;
    value dd = json::object{};
    dd["item_id"] = value(item_id);
    dd["output_index"] = value(index);
    dd["name"] = value(c.name);
    dd["arguments"] = value(c.arguments);
    if (!co_await event("response.function_call_arguments.done", std::move(dd))) co_return false;
    value done = call_item(c, "completed");
    output.push_back(done);
    value e = json::object{};
    e["output_index"] = value(index);
    e["item"] = std::move(done);
    co_return co_await event("response.output_item.done", std::move(e));
  };
  chat_outcome o;
  if (ok)
    o = co_await pump_chat(run, sink, w);
  else
    s->cancel();
  if (w.client_gone()) co_return;
  if (!o.error.empty()) {
    value d = json::object{};
    d["code"] = value("server_error");
    d["message"] = value(o.error);
    d["param"] = value();
    co_await event("error", std::move(d));
  } else {
    ok = co_await close_reasoning() && co_await close_message();
    if (output.as_array().empty() && ok) ok = co_await open_message() && co_await close_message();
    // response.completed ends every finished stream (the official client's stream helper waits
    // for it); a response cut by max_output_tokens has status "incomplete" in it.
    const bool incomplete = o.finish == finish_reason::length;
    if (ok)
      co_await event("response.completed",
                     with_response(incomplete ? "incomplete" : "completed", usage_of(o)));
  }
  co_await w.end_stream();
}

}  // namespace coserve::http
