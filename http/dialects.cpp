// /v1/responses and /v1/messages: request translation (pure functions, http/dialects.hpp) and the
// two handlers, which run the translated chat request through drain_chat() and write the
// dialect's body or events.
#include "http/dialects.hpp"

#include <chrono>
#include <functional>

#include <asio/experimental/awaitable_operators.hpp>

#include "http/openai_api.hpp"
#include "http/reasoning.hpp"
#include "http/tool_calls.hpp"

namespace coserve::http {

using namespace asio::experimental::awaitable_operators;
using json::value;

namespace {

api_error bad(std::string message, std::string param) { return api_error::bad_request(std::move(message), std::move(param)); }

// Text of a content given as a string or a list of text parts ({type: <one of kinds>, text}).
std::variant<std::string, api_error> content_text(const value& c, const std::string& field,
                                                  std::initializer_list<std::string_view> kinds) {
  if (c.is_null()) return std::string();
  if (c.is_string()) return c.as_string();
  if (!c.is_array()) return bad("'" + field + "' must be a string or a list of text parts", field);
  std::string out;
  for (const auto& part : c.as_array()) {
    const value* type = part.is_object() ? part.find("type") : nullptr;
    const value* text = part.is_object() ? part.find("text") : nullptr;
    bool known = false;
    if (type && type->is_string())
      for (auto k : kinds) known = known || type->as_string() == k;
    if (!known || !text || !text->is_string())
      return bad("'" + field + "' parts must be text parts (" + std::string(*kinds.begin()) + " with a string 'text')",
                 field);
    if (!out.empty()) out += "\n";
    out += text->as_string();
  }
  return out;
}

value message(const char* role, std::string content) {
  value m = json::object{};
  m["role"] = value(role);
  m["content"] = value(std::move(content));
  return m;
}

value chat_tool_call(const std::string& id, const std::string& name, std::string arguments) {
  value fn = json::object{};
  fn["name"] = value(name);
  fn["arguments"] = value(std::move(arguments));
  value c = json::object{};
  c["id"] = value(id);
  c["type"] = value("function");
  c["function"] = std::move(fn);
  return c;
}

value chat_tool(const value& name, const value* description, const value* parameters) {
  value fn = json::object{};
  fn["name"] = name;
  if (description && description->is_string()) fn["description"] = *description;
  if (parameters && !parameters->is_null()) fn["parameters"] = *parameters;
  value t = json::object{};
  t["type"] = value("function");
  t["function"] = std::move(fn);
  return t;
}

// Appends an assistant tool call, merged into the previous assistant message when there is one.
void push_call(value& messages, value call) {
  auto& arr = messages.as_array();
  if (arr.empty() || arr.back().find("role")->as_string() != "assistant") {
    value m = json::object{};
    m["role"] = value("assistant");
    m["content"] = value();
    arr.push_back(std::move(m));
  }
  value& last = arr.back();
  if (!last.find("tool_calls")) last["tool_calls"] = json::array{};
  last["tool_calls"].push_back(std::move(call));
}

void copy_if(const value& from, const char* key, value& to, const char* as = nullptr) {
  if (const value* v = from.find(key); v && !v->is_null()) to[as ? as : key] = *v;
}

std::string rename_prefix(const std::string& p, std::initializer_list<std::pair<std::string_view, std::string_view>> map) {
  for (auto [from, to] : map)
    if (p.compare(0, from.size(), from) == 0) return std::string(to) + p.substr(from.size());
  return p;
}

}  // namespace

// ---- Responses ----------------------------------------------------------------------------------

std::variant<value, api_error> responses_to_chat(const value& body) {
  value chat = json::object{};
  value messages = json::array{};
  if (const value* p = body.find("previous_response_id"); p && !p->is_null())
    return bad("'previous_response_id' is not supported: responses are not stored; send the conversation in 'input'",
               "previous_response_id");
  if (const value* b = body.find("background"); b && b->is_bool() && b->as_bool())
    return bad("'background' responses are not supported", "background");
  if (const value* ins = body.find("instructions"); ins && !ins->is_null()) {
    if (!ins->is_string()) return bad("'instructions' must be a string", "instructions");
    messages.push_back(message("system", ins->as_string()));
  }
  const value* input = body.find("input");
  if (!input || input->is_null()) return bad("'input' is required", "input");
  if (input->is_string()) {
    messages.push_back(message("user", input->as_string()));
  } else if (input->is_array()) {
    for (const auto& item : input->as_array()) {
      if (!item.is_object()) return bad("'input' items must be objects", "input");
      const value* type = item.find("type");
      const std::string t = type && type->is_string() ? type->as_string() : "message";
      if (t == "message") {
        const value* role = item.find("role");
        if (!role || !role->is_string()) return bad("'input' messages need a string 'role'", "input");
        std::string r = role->as_string() == "developer" ? "system" : role->as_string();
        if (r != "system" && r != "user" && r != "assistant")
          return bad("'input' message role must be user, assistant, system or developer", "input");
        const value* c = item.find("content");
        auto text = content_text(c ? *c : value(), "input", {"input_text", "output_text", "text"});
        if (auto* e = std::get_if<api_error>(&text)) return *e;
        messages.push_back(message(r.c_str(), std::get<std::string>(text)));
      } else if (t == "function_call") {
        const value* name = item.find("name");
        const value* args = item.find("arguments");
        const value* id = item.find("call_id");
        if (!name || !name->is_string() || !args || !args->is_string() || !id || !id->is_string())
          return bad("'input' function_call items need string call_id, name and arguments", "input");
        push_call(messages, chat_tool_call(id->as_string(), name->as_string(), args->as_string()));
      } else if (t == "function_call_output") {
        const value* id = item.find("call_id");
        const value* out = item.find("output");
        if (!id || !id->is_string() || !out) return bad("'input' function_call_output items need call_id and output", "input");
        auto text = content_text(*out, "input", {"input_text", "output_text", "text"});
        if (auto* e = std::get_if<api_error>(&text)) return *e;
        value m = message("tool", std::get<std::string>(text));
        m["tool_call_id"] = *id;
        messages.push_back(std::move(m));
      } else if (t == "reasoning") {
        continue;  // earlier reasoning is not sent back to the model
      } else {
        return bad("'input' item type '" + t + "' is not supported", "input");
      }
    }
  } else {
    return bad("'input' must be a string or a list of items", "input");
  }
  if (messages.as_array().empty()) return bad("'input' must not be empty", "input");
  chat["messages"] = std::move(messages);
  copy_if(body, "max_output_tokens", chat, "max_tokens");
  for (const char* k : {"temperature", "top_p", "stream", "parallel_tool_calls", "user", "seed", "top_k", "min_p",
                        "repetition_penalty", "stop"})
    copy_if(body, k, chat);
  if (const value* tools = body.find("tools"); tools && !tools->is_null()) {
    if (!tools->is_array()) return bad("'tools' must be an array", "tools");
    value out = json::array{};
    for (const auto& t : tools->as_array()) {
      const value* type = t.is_object() ? t.find("type") : nullptr;
      if (!type || !type->is_string() || type->as_string() != "function")
        return bad("only tools of type 'function' are supported", "tools");
      const value* name = t.find("name");
      if (!name || !name->is_string()) return bad("'tools' entries need a string 'name'", "tools");
      out.push_back(chat_tool(*name, t.find("description"), t.find("parameters")));
    }
    chat["tools"] = std::move(out);
  }
  if (const value* tc = body.find("tool_choice"); tc && !tc->is_null()) {
    if (tc->is_object()) {
      const value* name = tc->find("name");
      if (!name || !name->is_string()) return bad("'tool_choice' must be a string or {\"type\": \"function\", \"name\": ...}", "tool_choice");
      value fn = json::object{};
      fn["name"] = *name;
      value c = json::object{};
      c["type"] = value("function");
      c["function"] = std::move(fn);
      chat["tool_choice"] = std::move(c);
    } else {
      chat["tool_choice"] = *tc;
    }
  }
  if (const value* text = body.find("text"); text && text->is_object())
    if (const value* fmt = text->find("format"); fmt && !fmt->is_null()) {
      if (!fmt->is_object()) return bad("'text.format' must be an object", "text.format");
      const value* type = fmt->find("type");
      if (!type || !type->is_string()) return bad("'text.format.type' is required", "text.format.type");
      if (type->as_string() == "json_schema") {
        value js = json::object{};
        copy_if(*fmt, "name", js);
        copy_if(*fmt, "schema", js);
        copy_if(*fmt, "strict", js);
        value rf = json::object{};
        rf["type"] = value("json_schema");
        rf["json_schema"] = std::move(js);
        chat["response_format"] = std::move(rf);
      } else {
        value rf = json::object{};
        rf["type"] = *type;
        chat["response_format"] = std::move(rf);
      }
    }
  return chat;
}

std::string responses_param(const std::string& p) {
  return rename_prefix(p, {{"max_tokens", "max_output_tokens"},
                           {"messages", "input"},
                           {"response_format.json_schema.", "text.format."},
                           {"response_format", "text.format"}});
}

// ---- Anthropic Messages -------------------------------------------------------------------------

std::variant<value, api_error> messages_to_chat(const value& body) {
  value chat = json::object{};
  value messages = json::array{};
  if (const value* sys = body.find("system"); sys && !sys->is_null()) {
    auto text = content_text(*sys, "system", {"text"});
    if (auto* e = std::get_if<api_error>(&text)) return *e;
    messages.push_back(message("system", std::get<std::string>(text)));
  }
  const value* msgs = body.find("messages");
  if (!msgs || !msgs->is_array() || msgs->as_array().empty()) return bad("'messages' must be a non-empty array", "messages");
  for (const auto& m : msgs->as_array()) {
    const value* role = m.is_object() ? m.find("role") : nullptr;
    if (!role || !role->is_string() || (role->as_string() != "user" && role->as_string() != "assistant"))
      return bad("'messages' entries need role 'user' or 'assistant'", "messages");
    const std::string& r = role->as_string();
    const value* c = m.find("content");
    if (!c) return bad("'messages' entries need 'content'", "messages");
    if (c->is_string()) {
      messages.push_back(message(r.c_str(), c->as_string()));
      continue;
    }
    if (!c->is_array()) return bad("'messages' content must be a string or a list of blocks", "messages");
    std::string text;
    bool has_text = false;
    auto flush_text = [&] {
      if (!has_text) return;
      messages.push_back(message(r.c_str(), text));
      text.clear();
      has_text = false;
    };
    for (const auto& block : c->as_array()) {
      const value* type = block.is_object() ? block.find("type") : nullptr;
      const std::string t = type && type->is_string() ? type->as_string() : "";
      if (t == "text") {
        const value* s = block.find("text");
        if (!s || !s->is_string()) return bad("text blocks need a string 'text'", "messages");
        if (has_text) text += "\n";
        text += s->as_string();
        has_text = true;
      } else if (t == "tool_use" && r == "assistant") {
        const value* id = block.find("id");
        const value* name = block.find("name");
        const value* input = block.find("input");
        if (!id || !id->is_string() || !name || !name->is_string() || !input || !input->is_object())
          return bad("tool_use blocks need string id and name and an object input", "messages");
        flush_text();
        push_call(messages, chat_tool_call(id->as_string(), name->as_string(), json::dump(*input)));
      } else if (t == "tool_result" && r == "user") {
        const value* id = block.find("tool_use_id");
        if (!id || !id->is_string()) return bad("tool_result blocks need a string tool_use_id", "messages");
        const value* rc = block.find("content");
        auto out = content_text(rc ? *rc : value(), "messages", {"text"});
        if (auto* e = std::get_if<api_error>(&out)) return *e;
        flush_text();
        value tm = message("tool", std::get<std::string>(out));
        tm["tool_call_id"] = *id;
        messages.push_back(std::move(tm));
      } else if (t == "thinking" || t == "redacted_thinking") {
        continue;  // earlier thinking is not sent back to the model
      } else {
        return bad("content block type '" + t + "' is not supported in a " + r + " message", "messages");
      }
    }
    flush_text();
  }
  chat["messages"] = std::move(messages);
  const value* mt = body.find("max_tokens");
  if (!mt || mt->is_null()) return bad("'max_tokens' is required", "max_tokens");
  chat["max_tokens"] = *mt;
  for (const char* k : {"temperature", "top_p", "top_k", "stream"}) copy_if(body, k, chat);
  copy_if(body, "stop_sequences", chat, "stop");
  if (const value* tools = body.find("tools"); tools && !tools->is_null()) {
    if (!tools->is_array()) return bad("'tools' must be an array", "tools");
    value out = json::array{};
    for (const auto& t : tools->as_array()) {
      const value* name = t.is_object() ? t.find("name") : nullptr;
      if (!name || !name->is_string()) return bad("'tools' entries need a string 'name'", "tools");
      if (const value* type = t.find("type"); type && type->is_string() && type->as_string() != "custom")
        return bad("tool type '" + type->as_string() + "' is not supported (only client tools with input_schema)", "tools");
      out.push_back(chat_tool(*name, t.find("description"), t.find("input_schema")));
    }
    chat["tools"] = std::move(out);
  }
  if (const value* tc = body.find("tool_choice"); tc && !tc->is_null()) {
    const value* type = tc->is_object() ? tc->find("type") : nullptr;
    if (!type || !type->is_string()) return bad("'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}", "tool_choice");
    const std::string& t = type->as_string();
    if (t == "auto" || t == "none") {
      chat["tool_choice"] = value(t);
    } else if (t == "any") {
      chat["tool_choice"] = value("required");
    } else if (t == "tool") {
      const value* name = tc->find("name");
      if (!name || !name->is_string()) return bad("'tool_choice' of type 'tool' needs a 'name'", "tool_choice");
      value fn = json::object{};
      fn["name"] = *name;
      value c = json::object{};
      c["type"] = value("function");
      c["function"] = std::move(fn);
      chat["tool_choice"] = std::move(c);
    } else {
      return bad("'tool_choice.type' must be auto, any, tool or none", "tool_choice");
    }
    if (const value* d = tc->find("disable_parallel_tool_use"); d && d->is_bool())
      chat["parallel_tool_calls"] = value(!d->as_bool());
  }
  return chat;
}

std::string messages_param(const std::string& p) {
  return rename_prefix(p, {{"stop", "stop_sequences"}});
}

std::string anthropic_error_json(const api_error& e) {
  const char* type = "invalid_request_error";
  switch (e.status) {
    case 401: type = "authentication_error"; break;
    case 403: type = "permission_error"; break;
    case 404: type = "not_found_error"; break;
    case 413: type = "request_too_large"; break;
    case 429: type = "rate_limit_error"; break;
    case 503: type = "overloaded_error"; break;
    default: if (e.status >= 500) type = "api_error";
  }
  value inner = json::object{};
  inner["type"] = value(type);
  inner["message"] = value(e.param.empty() ? e.message : e.message + " (" + e.param + ")");
  value v = json::object{};
  v["type"] = value("error");
  v["error"] = std::move(inner);
  std::string out;
  json::dump_compact(v, out);
  return out;
}

// ---- the shared run ----------------------------------------------------------------------------

asio::awaitable<openai_api::chat_outcome> openai_api::drain_chat(request_stream& s, const openai_request& r,
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

asio::awaitable<std::variant<openai_api::dialect_run, api_error>> openai_api::start_dialect(
    const std::string& body_text, const dialect_rules& rules) {
  auto parsed = parse_json_object(body_text);
  if (auto* e = std::get_if<api_error>(&parsed)) co_return *e;
  const value& body = std::get<value>(parsed);
  auto chat = rules.translate(body);
  if (auto* e = std::get_if<api_error>(&chat)) co_return *e;
  if (const value* m = body.find("model"); m && m->is_string()) std::get<value>(chat)["model"] = *m;
  const std::string chat_text = json::dump(std::get<value>(chat));
  auto pr = parse_openai_request(chat_text, true, limits_);
  if (auto* e = std::get_if<api_error>(&pr)) {
    api_error err = *e;
    err.param = rules.param(err.param);
    co_return err;
  }
  dialect_run run{body, std::move(std::get<openai_request>(pr)), nullptr};
  generate_request g;
  g.input = run.r.chat_in;
  g.add_special_tokens = false;
  g.params = run.r.params;
  g.structured = run.r.structured;
  g.context = context_of(run.r);
  g.context.input_param = rules.input_param;
  if (!run.r.max_tokens_given || run.r.max_tokens_param == "max_tokens") g.context.max_tokens_param = rules.max_tokens_param;
  auto submitted = co_await eng().submit(std::move(g));
  if (!submitted) {
    api_error err = from_engine_error(submitted.err(), rules.input_param);
    err.param = rules.param(err.param);
    co_return err;
  }
  run.s = std::move(*submitted);
  co_return run;
}

asio::awaitable<openai_api::collected_chat> openai_api::collect_chat(dialect_run& run, response_writer& w) {
  collected_chat out;
  chat_sink sink;
  sink.reasoning = [&](const std::string& t) -> asio::awaitable<bool> { out.reasoning += t; co_return true; };
  sink.content = [&](const std::string& t) -> asio::awaitable<bool> { out.text += t; co_return true; };
  sink.call = [&](const tool_call& c) -> asio::awaitable<bool> { out.calls.push_back(c); co_return true; };
  out.outcome = co_await pump_chat(run, sink, w);
  co_return out;
}

asio::awaitable<openai_api::chat_outcome> openai_api::pump_chat(dialect_run& run, const chat_sink& sink,
                                                                response_writer& w) {
  chat_outcome o;
  auto go = [&]() -> asio::awaitable<void> { o = co_await drain_chat(*run.s, run.r, sink); };
  auto watch = [&]() -> asio::awaitable<void> {
    if (co_await w.wait_disconnect()) run.s->cancel();
  };
  co_await (go() || watch());
  co_return o;
}

namespace {

int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string sse_named(std::string_view event, const value& data) {
  std::string out = "event: ";
  out += event;
  out += "\ndata: ";
  json::dump_compact(data, out);
  out += "\n\n";
  return out;
}

}  // namespace

// ---- /v1/responses ------------------------------------------------------------------------------

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
    v["model"] = value(limits_.served_model_name);
    v["output"] = output;
    v["parallel_tool_calls"] = value(r.parallel_tool_calls);
    v["tool_choice"] = body.find("tool_choice") && !body.find("tool_choice")->is_null() ? *body.find("tool_choice") : value("auto");
    v["tools"] = body.find("tools") && body.find("tools")->is_array() ? *body.find("tools") : value(json::array{});
    v["temperature"] = value(double(r.params.temperature));
    v["top_p"] = value(double(r.params.top_p));
    v["max_output_tokens"] = r.max_tokens_given ? value(int64_t{r.params.max_tokens}) : value();
    v["instructions"] = body.find("instructions") ? *body.find("instructions") : value();
    v["metadata"] = body.find("metadata") && body.find("metadata")->is_object() ? *body.find("metadata") : value(json::object{});
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
    const std::string chunk = sse_named(type, data);
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
  if (ok) o = co_await pump_chat(run, sink, w);
  else s->cancel();
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
    if (ok) co_await event("response.completed", with_response(incomplete ? "incomplete" : "completed", usage_of(o)));
  }
  co_await w.end_stream();
}

// ---- /v1/messages -------------------------------------------------------------------------------

asio::awaitable<void> openai_api::messages(http_request& req, response_writer& w) {
  auto fail = [&](const api_error& e) -> asio::awaitable<void> {
    http_response resp{e.status, "application/json", anthropic_error_json(e), {}};
    if (e.status == 429) resp.headers.emplace_back("Retry-After", "1");
    co_await respond(w, resp);
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
    v["model"] = value(limits_.served_model_name);
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
    const std::string chunk = sse_named(type, data);
    co_return co_await w.write_chunk(chunk);
  };
  value start = json::object{};
  {
    value m = json::object{};
    m["id"] = value(id);
    m["type"] = value("message");
    m["role"] = value("assistant");
    m["model"] = value(limits_.served_model_name);
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
  if (ok) o = co_await pump_chat(run, sink, w);
  else s->cancel();
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
