// POST /v1/responses (OpenAI Responses API): the translated chat request's output as a response
// object with reasoning, message and function_call items, or as response.* events.
#include <asio/this_coro.hpp>
#include <chrono>

#include "http/chat_run.hpp"
#include "http/dialects.hpp"
#include "http/openai_api.hpp"
#include "http/request_fields.hpp"
#include "http/sse_stream.hpp"

namespace coserve::http {

using json::value;

namespace {

int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The response object and its output items, as the client's Response model reads them.
class response_doc {
 public:
  response_doc(std::string id, std::string reasoning_id, std::string message_id, const value& body,
               const openai_request& r, std::string model)
      : id_(std::move(id)),
        reasoning_id_(std::move(reasoning_id)),
        message_id_(std::move(message_id)),
        created_(now_seconds()),
        body_(body),
        r_(r),
        model_(std::move(model)) {}

  const std::string& reasoning_id() const noexcept { return reasoning_id_; }
  const std::string& message_id() const noexcept { return message_id_; }

  value response(const char* status, const value& output, const value& usage) const {
    value v = json::object{};
    v["id"] = value(id_);
    v["object"] = value("response");
    v["created_at"] = value(created_);
    v["status"] = value(status);
    v["model"] = value(model_);
    v["output"] = output;
    v["parallel_tool_calls"] = value(r_.parallel_tool_calls);
    v["tool_choice"] =
        find_field(body_, "tool_choice") && !find_field(body_, "tool_choice")->is_null()
            ? *find_field(body_, "tool_choice")
            : value("auto");
    v["tools"] = find_field(body_, "tools") && find_field(body_, "tools")->is_array()
                     ? *find_field(body_, "tools")
                     : value(json::array{});
    v["temperature"] = value(double(r_.params.temperature));
    v["top_p"] = value(double(r_.params.top_p));
    v["max_output_tokens"] = r_.max_tokens_given ? value(int64_t{r_.params.max_tokens}) : value();
    v["instructions"] =
        find_field(body_, "instructions") ? *find_field(body_, "instructions") : value();
    v["metadata"] = find_field(body_, "metadata") && find_field(body_, "metadata")->is_object()
                        ? *find_field(body_, "metadata")
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
  }

  static value usage(const chat_outcome& o) {
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
  }

  static value output_text(const std::string& text) {
    value part = json::object{};
    part["type"] = value("output_text");
    part["text"] = value(text);
    part["annotations"] = json::array{};
    return part;
  }

  value message_item(const char* status, const std::string& text) const {
    value item = json::object{};
    item["id"] = value(message_id_);
    item["type"] = value("message");
    item["status"] = value(status);
    item["role"] = value("assistant");
    item["content"] = json::array{output_text(text)};
    return item;
  }

  value reasoning_item(const std::string& text) const {
    value part = json::object{};
    part["type"] = value("reasoning_text");
    part["text"] = value(text);
    value item = json::object{};
    item["id"] = value(reasoning_id_);
    item["type"] = value("reasoning");
    item["summary"] = json::array{};
    item["content"] = json::array{std::move(part)};
    return item;
  }

  static std::string call_item_id(const tool_call& c) {
    return "fc_" + c.id.substr(c.id.rfind('-') + 1);
  }
  static value call_item(const tool_call& c, const char* status) {
    value item = json::object{};
    item["id"] = value(call_item_id(c));
    item["type"] = value("function_call");
    item["call_id"] = value(c.id);
    item["name"] = value(c.name);
    item["arguments"] = value(c.arguments);
    item["status"] = value(status);
    return item;
  }

  // The whole response: reasoning, the message (also when empty and there are no calls), calls.
  value whole(const dialect_collector& got) const {
    const chat_outcome& o = got.outcome();
    value output = json::array{};
    if (!got.reasoning_text.empty()) output.push_back(reasoning_item(got.reasoning_text));
    if (!got.text.empty() || got.calls.empty())
      output.push_back(message_item("completed", got.text));
    for (const auto& c : got.calls) output.push_back(call_item(c, "completed"));
    const char* status = o.finish == finish_reason::length ? "incomplete" : "completed";
    return response(status, output, usage(o));
  }

 private:
  std::string id_, reasoning_id_, message_id_;
  int64_t created_;
  const value& body_;
  const openai_request& r_;
  std::string model_;
};

// Streamed: response.* events. Output items are opened as the output streams (reasoning, then
// the message, then function calls), one open at a time, each closed by its .done events.
class response_events final : public dialect_sink {
 public:
  response_events(const response_doc& doc, sse_stream& out) : doc_(doc), out_(out) {}

  asio::awaitable<bool> open() override {
    const value null_usage;
    co_return co_await event("response.created", with_response("in_progress", null_usage)) &&
        co_await event("response.in_progress", with_response("in_progress", null_usage));
  }

  // response.completed ends every finished stream (the official client's stream helper waits for
  // it); a response cut by max_output_tokens has status "incomplete" in it.
  asio::awaitable<void> close() override {
    bool ok = co_await close_reasoning() && co_await close_message();
    if (output_.as_array().empty() && ok) ok = co_await open_message() && co_await close_message();
    const bool incomplete = outcome().finish == finish_reason::length;
    if (ok)
      co_await event("response.completed", with_response(incomplete ? "incomplete" : "completed",
                                                         response_doc::usage(outcome())));
  }

 protected:
  asio::awaitable<bool> reasoning(const std::string& t) override {
    if (reasoning_index_ == k_unopened) {
      reasoning_index_ = next_index_++;
      value item = doc_.reasoning_item(reasoning_text_);
      item["content"] = json::array{};
      if (!co_await item_added(std::move(item), reasoning_index_)) co_return false;
    }
    reasoning_text_ += t;
    value d = at(doc_.reasoning_id(), reasoning_index_);
    d["delta"] = value(t);
    co_return co_await event("response.reasoning_text.delta", std::move(d));
  }

  asio::awaitable<bool> content(const std::string& t) override {
    if (!co_await open_message()) co_return false;
    message_text_ += t;
    value d = at(doc_.message_id(), message_index_);
    d["delta"] = value(t);
    d["logprobs"] = json::array{};
    co_return co_await event("response.output_text.delta", std::move(d));
  }

  asio::awaitable<bool> call(const tool_call& c) override {
    if (!co_await close_reasoning() || !co_await close_message()) co_return false;
    const int64_t index = next_index_++;
    value item = response_doc::call_item(c, "in_progress");
    item["arguments"] = value("");
    if (!co_await item_added(std::move(item), index)) co_return false;
    const std::string item_id = response_doc::call_item_id(c);
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
    co_return co_await item_done(response_doc::call_item(c, "completed"), index);
  }

  asio::awaitable<void> failed(const std::string& message) override {
    value d = json::object{};
    d["code"] = value("server_error");
    d["message"] = value(message);
    d["param"] = value();
    co_await event("error", std::move(d));
  }

 private:
  static constexpr int64_t k_unopened = -1, k_closed = -2;  // item indexes before and after

  asio::awaitable<bool> event(const char* type, value data) {
    data["type"] = value(type);
    data["sequence_number"] = value(seq_++);
    const std::string chunk = sse_named_event(type, data);
    co_return co_await out_.write(chunk);
  }
  value with_response(const char* status, const value& usage) const {
    value d = json::object{};
    d["response"] = doc_.response(status, output_, usage);
    return d;
  }
  // {item_id, output_index, content_index: 0}: where a content event belongs.
  static value at(const std::string& item_id, int64_t index) {
    value d = json::object{};
    d["item_id"] = value(item_id);
    d["output_index"] = value(index);
    d["content_index"] = value(int64_t{0});
    return d;
  }
  asio::awaitable<bool> item_added(value item, int64_t index) {
    value d = json::object{};
    d["output_index"] = value(index);
    d["item"] = std::move(item);
    co_return co_await event("response.output_item.added", std::move(d));
  }
  // The item joins the response's output, and response.output_item.done says so.
  asio::awaitable<bool> item_done(value item, int64_t index) {
    output_.push_back(item);
    value e = json::object{};
    e["output_index"] = value(index);
    e["item"] = std::move(item);
    co_return co_await event("response.output_item.done", std::move(e));
  }

  asio::awaitable<bool> close_reasoning() {
    if (reasoning_index_ < 0) co_return true;
    value d = at(doc_.reasoning_id(), reasoning_index_);
    d["text"] = value(reasoning_text_);
    bool good = co_await event("response.reasoning_text.done", std::move(d));
    good = good && co_await item_done(doc_.reasoning_item(reasoning_text_), reasoning_index_);
    reasoning_index_ = k_closed;
    co_return good;
  }

  asio::awaitable<bool> open_message() {
    if (message_index_ >= 0) co_return true;
    if (!co_await close_reasoning()) co_return false;
    message_index_ = next_index_++;
    if (!co_await item_added(doc_.message_item("in_progress", message_text_), message_index_))
      co_return false;
    value d = at(doc_.message_id(), message_index_);
    d["part"] = response_doc::output_text("");
    co_return co_await event("response.content_part.added", std::move(d));
  }

  asio::awaitable<bool> close_message() {
    if (message_index_ < 0) co_return true;
    value d = at(doc_.message_id(), message_index_);
    d["text"] = value(message_text_);
    d["logprobs"] = json::array{};
    bool good = co_await event("response.output_text.done", std::move(d));
    value pd = at(doc_.message_id(), message_index_);
    pd["part"] = response_doc::output_text(message_text_);
    good = good && co_await event("response.content_part.done", std::move(pd));
    good =
        good && co_await item_done(doc_.message_item("completed", message_text_), message_index_);
    message_index_ = k_closed;
    co_return good;
  }

  const response_doc& doc_;
  sse_stream& out_;
  int64_t seq_ = 0;
  value output_ = json::array{};  // the items done so far
  std::string reasoning_text_, message_text_;
  int64_t reasoning_index_ = k_unopened, message_index_ = k_unopened, next_index_ = 0;
};

}  // namespace

asio::awaitable<void> openai_api::responses(http_request& req, response_writer& w) {
  const dialect_rules rules{responses_to_chat, responses_param, "input", "max_output_tokens"};
  auto started = co_await start_dialect(req.body, rules);
  if (auto* e = std::get_if<api_error>(&started)) {
    const api_error err = *e;
    co_return co_await respond_error(w, err);
  }
  dialect_run& run = std::get<dialect_run>(started);
  const std::string id = new_id("resp");
  const response_doc doc(id, new_id("rs"), new_id("msg"), run.body, run.r,
                         run.r.model.empty() ? limits_.served_model_name : run.r.model);
  output_reader reader({run.s}, 1, split_rules_of(run.r));
  if (run.r.stream) {
    sse_stream out(w, metrics_, options_.sse_keepalive, co_await asio::this_coro::executor);
    response_events events(doc, out);
    co_return co_await out.run(reader, events, {});
  }
  dialect_collector got;
  co_await collect_output(w, reader, got);
  if (w.client_gone()) co_return;
  if (!got.outcome().error.empty()) {
    const api_error err{500, got.outcome().error, "InternalServerError", {}, {}};
    co_return co_await respond_error(w, err);
  }
  std::string out;
  json::dump_compact(doc.whole(got), out);
  co_await respond_json(w, 200, out);
}

}  // namespace coserve::http
