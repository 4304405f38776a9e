// POST /v1/messages (Anthropic Messages API): the translated chat request's output as a message
// with thinking, text and tool_use blocks, or as message_* / content_block_* events; errors in
// Anthropic's shape.
#include <asio/this_coro.hpp>

#include "http/chat_run.hpp"
#include "http/dialects.hpp"
#include "http/openai_api.hpp"
#include "http/sse_stream.hpp"

namespace coserve::http {

using json::value;

namespace {

value stop_reason(const chat_outcome& o) {
  if (o.tool_calls && o.finish == finish_reason::stop) return value("tool_use");
  if (o.finish == finish_reason::length) return value("max_tokens");
  if (!o.stop_reason.empty()) return value("stop_sequence");
  return value("end_turn");
}

value stop_sequence(const chat_outcome& o) {
  return o.stop_reason.empty() ? value() : value(o.stop_reason);
}

value tool_use_block(const tool_call& c) {
  value b = json::object{};
  b["type"] = value("tool_use");
  b["id"] = value("toolu_" + c.id.substr(c.id.rfind('-') + 1));
  b["name"] = value(c.name);
  auto input = json::parse(c.arguments);
  b["input"] = input && input->is_object() ? *input : value(json::object{});
  return b;
}

value text_block(const std::string& text) {
  value b = json::object{};
  b["type"] = value("text");
  b["text"] = value(text);
  return b;
}

value thinking_block(const std::string& thinking) {
  value b = json::object{};
  b["type"] = value("thinking");
  b["thinking"] = value(thinking);
  b["signature"] = value("");
  return b;
}

// The message object: id, role, model and content blocks; stop fields and usage as given.
value message_object(const std::string& id, const std::string& model, value content) {
  value v = json::object{};
  v["id"] = value(id);
  v["type"] = value("message");
  v["role"] = value("assistant");
  v["model"] = value(model);
  v["content"] = std::move(content);
  return v;
}

// The whole message: thinking, text (also when empty and there are no calls), tool_use blocks.
value whole_message(const std::string& id, const std::string& model, const dialect_collector& got) {
  const chat_outcome& o = got.outcome();
  value content = json::array{};
  if (!got.reasoning_text.empty()) content.push_back(thinking_block(got.reasoning_text));
  if (!got.text.empty() || got.calls.empty()) content.push_back(text_block(got.text));
  for (const auto& c : got.calls) content.push_back(tool_use_block(c));
  value v = message_object(id, model, std::move(content));
  v["stop_reason"] = stop_reason(o);
  v["stop_sequence"] = stop_sequence(o);
  value usage = json::object{};
  usage["input_tokens"] = value(o.prompt_tokens);
  usage["output_tokens"] = value(o.completion_tokens);
  usage["cache_read_input_tokens"] = value(o.cached_tokens);
  v["usage"] = std::move(usage);
  return v;
}

// Streamed: message_start, content blocks one open at a time (thinking, text, then tool_use
// blocks) with their deltas, message_delta and message_stop.
class message_events final : public dialect_sink {
 public:
  message_events(std::string id, std::string model, const request_stream& s, sse_stream& out)
      : id_(std::move(id)), model_(std::move(model)), s_(s), out_(out) {}

  asio::awaitable<bool> open() override {
    value m = message_object(id_, model_, json::array{});
    m["stop_reason"] = value();
    m["stop_sequence"] = value();
    value usage = json::object{};
    usage["input_tokens"] = value(static_cast<int64_t>(s_.prompt_ids().size()));
    usage["output_tokens"] = value(int64_t{0});
    m["usage"] = std::move(usage);
    value start = json::object{};
    start["message"] = std::move(m);
    co_return co_await event("message_start", std::move(start));
  }

  asio::awaitable<void> close() override {
    bool ok = true;
    if (index_ < 0) {  // no output at all: an empty text block, as Anthropic sends
      ok = co_await open_block("text", text_block(""));
    }
    ok = ok && co_await close_block();
    value dl = json::object{};
    dl["stop_reason"] = stop_reason(outcome());
    dl["stop_sequence"] = stop_sequence(outcome());
    value md = json::object{};
    md["delta"] = std::move(dl);
    value usage = json::object{};
    usage["output_tokens"] = value(outcome().completion_tokens);
    md["usage"] = std::move(usage);
    ok = ok && co_await event("message_delta", std::move(md));
    if (ok) co_await event("message_stop", value(json::object{}));
  }

 protected:
  asio::awaitable<bool> reasoning(const std::string& t) override {
    if (!co_await open_block("thinking", thinking_block(""))) co_return false;
    value dl = json::object{};
    dl["type"] = value("thinking_delta");
    dl["thinking"] = value(t);
    co_return co_await delta(std::move(dl));
  }

  asio::awaitable<bool> content(const std::string& t) override {
    if (!co_await open_block("text", text_block(""))) co_return false;
    value dl = json::object{};
    dl["type"] = value("text_delta");
    dl["text"] = value(t);
    co_return co_await delta(std::move(dl));
  }

  asio::awaitable<bool> call(const tool_call& c) override {
    if (!co_await close_block()) co_return false;
    value b = tool_use_block(c);
    b["input"] = json::object{};
    if (!co_await open_block("tool_use", std::move(b))) co_return false;
    value dl = json::object{};
    dl["type"] = value("input_json_delta");
    dl["partial_json"] = value(c.arguments);
    if (!co_await delta(std::move(dl))) co_return false;
    co_return co_await close_block();
  }

  asio::awaitable<void> failed(const std::string& message) override {
    value err = json::object{};
    err["type"] = value("api_error");
    err["message"] = value(message);
    value d = json::object{};
    d["error"] = std::move(err);
    co_await event("error", std::move(d));
  }

 private:
  asio::awaitable<bool> event(const char* type, value data) {
    data["type"] = value(type);
    const std::string chunk = sse_named_event(type, data);
    co_return co_await out_.write(chunk);
  }
  asio::awaitable<bool> close_block() {
    if (open_.empty()) co_return true;
    value d = json::object{};
    d["index"] = value(index_);
    open_.clear();
    co_return co_await event("content_block_stop", std::move(d));
  }
  // Opens a block of `type` unless one is open already (closing another first).
  asio::awaitable<bool> open_block(const char* type, value block) {
    if (open_ == type) co_return true;
    if (!co_await close_block()) co_return false;
    ++index_;
    open_ = type;
    value d = json::object{};
    d["index"] = value(index_);
    d["content_block"] = std::move(block);
    co_return co_await event("content_block_start", std::move(d));
  }
  asio::awaitable<bool> delta(value dl) {
    value d = json::object{};
    d["index"] = value(index_);
    d["delta"] = std::move(dl);
    co_return co_await event("content_block_delta", std::move(d));
  }

  std::string id_, model_;
  const request_stream& s_;
  sse_stream& out_;
  int64_t index_ = -1;  // the last block opened
  std::string open_;    // type of the open block, "" when none
};

}  // namespace

asio::awaitable<void> openai_api::messages(http_request& req, response_writer& w) {
  const dialect_rules rules{messages_to_chat, messages_param, "messages", "max_tokens"};
  auto started = co_await start_dialect(req.body, rules);
  if (auto* e = std::get_if<api_error>(&started)) {
    const api_error err = *e;
    co_return co_await respond_anthropic_error(w, err);
  }
  dialect_run& run = std::get<dialect_run>(started);
  const std::string id = new_id("msg");
  const std::string model = run.r.model.empty() ? limits_.served_model_name : run.r.model;
  output_reader reader({run.s}, 1, split_rules_of(run.r));
  if (run.r.stream) {
    sse_stream out(w, metrics_, options_.sse_keepalive, co_await asio::this_coro::executor);
    message_events events(id, model, *run.s, out);
    co_return co_await out.run(reader, events, {});
  }
  dialect_collector got;
  co_await collect_output(w, reader, got);
  if (w.client_gone()) co_return;
  if (!got.outcome().error.empty()) {
    const api_error err{500, got.outcome().error, "InternalServerError", {}, {}};
    co_return co_await respond_anthropic_error(w, err);
  }
  std::string out;
  json::dump_compact(whole_message(id, model, got), out);
  co_await respond_json(w, 200, out);
}

}  // namespace coserve::http
