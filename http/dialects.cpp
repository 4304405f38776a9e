// /v1/responses and /v1/messages, the part without I/O: each request body translated into a chat
// completions body (http/dialects.hpp), parameter names mapped back, Anthropic's error body and
// named SSE events. The handlers are http/responses_api.cpp and http/messages_api.cpp; the run
// they share is http/chat_run.cpp. Over 500 lines: the two translations, one step per group of
// fields, over the message and tool builders at the top that both use.
#include "http/dialects.hpp"

#include <optional>

#include "http/request_fields.hpp"

namespace coserve::http {

using json::value;

namespace {

api_error bad(std::string message, std::string param) {
  return api_error::bad_request(std::move(message), std::move(param));
}

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
      return bad("'" + field + "' parts must be text parts (" + std::string(*kinds.begin()) +
                     " with a string 'text')",
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

void copy_if(const value& from, std::string_view key, value& to, const char* as = nullptr) {
  if (const value* v = from.find(key); v && !v->is_null()) to[as ? std::string_view(as) : key] = *v;
}

// A request field copied into the chat body (named `as` there when given) unless absent or null.
void copy_field(const value& body, declared_field f, value& chat, const char* as = nullptr) {
  copy_if(body, f.name, chat, as);
}

// {"type": "function", "function": {"name": name}}: chat's tool_choice naming a function.
value named_tool_choice(const value& name) {
  value fn = json::object{};
  fn["name"] = name;
  value c = json::object{};
  c["type"] = value("function");
  c["function"] = std::move(fn);
  return c;
}

std::string rename_prefix(
    const std::string& p,
    std::initializer_list<std::pair<std::string_view, std::string_view>> map) {
  for (auto [from, to] : map)
    if (p.compare(0, from.size(), from) == 0) return std::string(to) + p.substr(from.size());
  return p;
}

}  // namespace

// ---- Responses ----------------------------------------------------------------------------------

namespace {

using maybe_error = std::optional<api_error>;

// What is not served: stored responses and background runs.
maybe_error refuse_unsupported(const value& body) {
  if (const value* p = find_field(body, "previous_response_id"); p && !p->is_null())
    return bad(
        "'previous_response_id' is not supported: responses are not stored; send the conversation "
        "in 'input'",
        "previous_response_id");
  if (const value* b = find_field(body, "background"); b && b->is_bool() && b->as_bool())
    return bad("'background' responses are not supported", "background");
  return std::nullopt;
}

// One `input` item (a message, a function call, its output; reasoning is dropped) as chat
// messages.
maybe_error add_input_item(const value& item, value& messages) {
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
    if (!id || !id->is_string() || !out)
      return bad("'input' function_call_output items need call_id and output", "input");
    auto text = content_text(*out, "input", {"input_text", "output_text", "text"});
    if (auto* e = std::get_if<api_error>(&text)) return *e;
    value m = message("tool", std::get<std::string>(text));
    m["tool_call_id"] = *id;
    messages.push_back(std::move(m));
  } else if (t != "reasoning") {  // earlier reasoning is not sent back to the model
    return bad("'input' item type '" + t + "' is not supported", "input");
  }
  return std::nullopt;
}

// `instructions` (a system message) and `input` (a user message, or items) as chat messages.
maybe_error input_messages(const value& body, value& chat) {
  value messages = json::array{};
  if (const value* ins = find_field(body, "instructions"); ins && !ins->is_null()) {
    if (!ins->is_string()) return bad("'instructions' must be a string", "instructions");
    messages.push_back(message("system", ins->as_string()));
  }
  const value* input = find_field(body, "input");
  if (!input || input->is_null()) return bad("'input' is required", "input");
  if (input->is_string()) {
    messages.push_back(message("user", input->as_string()));
  } else if (input->is_array()) {
    for (const auto& item : input->as_array())
      if (auto e = add_input_item(item, messages)) return e;
  } else {
    return bad("'input' must be a string or a list of items", "input");
  }
  if (messages.as_array().empty()) return bad("'input' must not be empty", "input");
  chat["messages"] = std::move(messages);
  return std::nullopt;
}

// Flat function tools ({type: function, name, description, parameters}) and tool_choice.
maybe_error response_tools(const value& body, value& chat) {
  if (const value* tools = find_field(body, "tools"); tools && !tools->is_null()) {
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
  if (const value* tc = find_field(body, "tool_choice"); tc && !tc->is_null()) {
    if (!tc->is_object()) {
      chat["tool_choice"] = *tc;
      return std::nullopt;
    }
    const value* name = tc->find("name");
    if (!name || !name->is_string())
      return bad("'tool_choice' must be a string or {\"type\": \"function\", \"name\": ...}",
                 "tool_choice");
    chat["tool_choice"] = named_tool_choice(*name);
  }
  return std::nullopt;
}

// text.format as response_format (json_schema's name, schema and strict one level up).
maybe_error text_format(const value& body, value& chat) {
  const value* text = find_field(body, "text");
  const value* fmt = text && text->is_object() ? text->find("format") : nullptr;
  if (!fmt || fmt->is_null()) return std::nullopt;
  if (!fmt->is_object()) return bad("'text.format' must be an object", "text.format");
  const value* type = fmt->find("type");
  if (!type || !type->is_string()) return bad("'text.format.type' is required", "text.format.type");
  value rf = json::object{};
  if (type->as_string() == "json_schema") {
    value js = json::object{};
    copy_if(*fmt, "name", js);
    copy_if(*fmt, "schema", js);
    copy_if(*fmt, "strict", js);
    rf["type"] = value("json_schema");
    rf["json_schema"] = std::move(js);
  } else {
    rf["type"] = *type;
  }
  chat["response_format"] = std::move(rf);
  return std::nullopt;
}

}  // namespace

std::variant<value, api_error> responses_to_chat(const value& body) {
  value chat = json::object{};
  if (auto e = refuse_unsupported(body)) return *e;
  if (auto e = input_messages(body, chat)) return *e;
  copy_field(body, "max_output_tokens", chat, "max_tokens");
  constexpr declared_field k_copied[] = {
      "temperature", "top_p", "stream", "parallel_tool_calls", "user",
      "seed",        "top_k", "min_p",  "repetition_penalty",  "stop"};
  for (declared_field k : k_copied) copy_field(body, k, chat);
  if (auto e = response_tools(body, chat)) return *e;
  // reasoning.effort reaches the template as reasoning_effort (as chat's reasoning_effort does);
  // chat_template_kwargs (vLLM's extension) pass through.
  if (const value* rz = find_field(body, "reasoning"); rz && !rz->is_null()) {
    if (!rz->is_object()) return bad("'reasoning' must be an object", "reasoning");
    if (const value* e = rz->find("effort"); e && !e->is_null()) chat["reasoning_effort"] = *e;
  }
  copy_field(body, "chat_template_kwargs", chat);
  if (auto e = text_format(body, chat)) return *e;
  return chat;
}

std::string responses_param(const std::string& p) {
  return rename_prefix(p, {{"max_tokens", "max_output_tokens"},
                           {"reasoning_effort", "reasoning.effort"},
                           {"messages", "input"},
                           {"response_format.json_schema.", "text.format."},
                           {"response_format", "text.format"}});
}

// ---- Anthropic Messages -------------------------------------------------------------------------

namespace {

// One Anthropic message's content as chat messages: text blocks joined into one message, a
// tool_use block as an assistant tool call, a tool_result block as a tool message.
class message_blocks {
 public:
  message_blocks(value& messages, const std::string& role) : messages_(messages), role_(role) {}

  maybe_error add(const value& block) {
    const value* type = block.is_object() ? block.find("type") : nullptr;
    const std::string t = type && type->is_string() ? type->as_string() : "";
    if (t == "text") return add_text(block);
    if (t == "tool_use" && role_ == "assistant") return add_tool_use(block);
    if (t == "tool_result" && role_ == "user") return add_tool_result(block);
    if (t == "thinking" || t == "redacted_thinking")
      return std::nullopt;  // earlier thinking is not sent back to the model
    return bad("content block type '" + t + "' is not supported in a " + role_ + " message",
               "messages");
  }

  // The text gathered since the last call or result, as a message of its own.
  void flush_text() {
    if (!has_text_) return;
    messages_.push_back(message(role_.c_str(), text_));
    text_.clear();
    has_text_ = false;
  }

 private:
  maybe_error add_text(const value& block) {
    const value* s = block.find("text");
    if (!s || !s->is_string()) return bad("text blocks need a string 'text'", "messages");
    if (has_text_) text_ += "\n";
    text_ += s->as_string();
    has_text_ = true;
    return std::nullopt;
  }
  maybe_error add_tool_use(const value& block) {
    const value* id = block.find("id");
    const value* name = block.find("name");
    const value* input = block.find("input");
    if (!id || !id->is_string() || !name || !name->is_string() || !input || !input->is_object())
      return bad("tool_use blocks need string id and name and an object input", "messages");
    flush_text();
    push_call(messages_, chat_tool_call(id->as_string(), name->as_string(), json::dump(*input)));
    return std::nullopt;
  }
  maybe_error add_tool_result(const value& block) {
    const value* id = block.find("tool_use_id");
    if (!id || !id->is_string())
      return bad("tool_result blocks need a string tool_use_id", "messages");
    const value* rc = block.find("content");
    auto out = content_text(rc ? *rc : value(), "messages", {"text"});
    if (auto* e = std::get_if<api_error>(&out)) return *e;
    flush_text();
    value tm = message("tool", std::get<std::string>(out));
    tm["tool_call_id"] = *id;
    messages_.push_back(std::move(tm));
    return std::nullopt;
  }

  value& messages_;
  const std::string& role_;
  std::string text_;
  bool has_text_ = false;
};

maybe_error add_anthropic_message(const value& m, value& messages) {
  const value* role = m.is_object() ? m.find("role") : nullptr;
  if (!role || !role->is_string() ||
      (role->as_string() != "user" && role->as_string() != "assistant"))
    return bad("'messages' entries need role 'user' or 'assistant'", "messages");
  const std::string& r = role->as_string();
  const value* c = m.find("content");
  if (!c) return bad("'messages' entries need 'content'", "messages");
  if (c->is_string()) {
    messages.push_back(message(r.c_str(), c->as_string()));
    return std::nullopt;
  }
  if (!c->is_array())
    return bad("'messages' content must be a string or a list of blocks", "messages");
  message_blocks blocks(messages, r);
  for (const auto& block : c->as_array())
    if (auto e = blocks.add(block)) return e;
  blocks.flush_text();
  return std::nullopt;
}

// `system` and `messages` as chat messages. A final assistant message is a prefill: the reply
// continues it (Anthropic's rule), rendered with continue_final_message.
maybe_error anthropic_messages(const value& body, value& chat) {
  value messages = json::array{};
  if (const value* sys = find_field(body, "system"); sys && !sys->is_null()) {
    auto text = content_text(*sys, "system", {"text"});
    if (auto* e = std::get_if<api_error>(&text)) return *e;
    messages.push_back(message("system", std::get<std::string>(text)));
  }
  const value* msgs = find_field(body, "messages");
  if (!msgs || !msgs->is_array() || msgs->as_array().empty())
    return bad("'messages' must be a non-empty array", "messages");
  for (const auto& m : msgs->as_array())
    if (auto e = add_anthropic_message(m, messages)) return e;
  if (!messages.as_array().empty() &&
      messages.as_array().back().find("role")->as_string() == "assistant" &&
      !messages.as_array().back().find("tool_calls")) {
    chat["continue_final_message"] = value(true);
    chat["add_generation_prompt"] = value(false);
  }
  chat["messages"] = std::move(messages);
  return std::nullopt;
}

// thinking {"type": "enabled" | "disabled"} reaches the template as enable_thinking (the switch
// Qwen3-style templates read) unless chat_template_kwargs (vLLM's extension) sets it; the budget
// is not enforced.
maybe_error thinking_switch(const value& body, value& chat) {
  copy_field(body, "chat_template_kwargs", chat);
  const value* th = find_field(body, "thinking");
  if (!th || th->is_null()) return std::nullopt;
  const value* type = th->is_object() ? th->find("type") : nullptr;
  if (!type || !type->is_string() ||
      (type->as_string() != "enabled" && type->as_string() != "disabled"))
    return bad(
        "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N} or {\"type\": "
        "\"disabled\"}",
        "thinking");
  value kwargs = json::object{};
  if (const value* given = chat.find("chat_template_kwargs"); given && given->is_object())
    kwargs = *given;
  if (!kwargs.find("enable_thinking"))
    kwargs["enable_thinking"] = value(type->as_string() == "enabled");
  chat["chat_template_kwargs"] = std::move(kwargs);
  return std::nullopt;
}

// Client tools ({name, description, input_schema}) as function tools.
maybe_error anthropic_tools(const value& body, value& chat) {
  const value* tools = find_field(body, "tools");
  if (!tools || tools->is_null()) return std::nullopt;
  if (!tools->is_array()) return bad("'tools' must be an array", "tools");
  value out = json::array{};
  for (const auto& t : tools->as_array()) {
    const value* name = t.is_object() ? t.find("name") : nullptr;
    if (!name || !name->is_string()) return bad("'tools' entries need a string 'name'", "tools");
    if (const value* type = t.find("type");
        type && type->is_string() && type->as_string() != "custom")
      return bad("tool type '" + type->as_string() +
                     "' is not supported (only client tools with input_schema)",
                 "tools");
    out.push_back(chat_tool(*name, t.find("description"), t.find("input_schema")));
  }
  chat["tools"] = std::move(out);
  return std::nullopt;
}

// tool_choice {type: auto | any | tool | none} as chat's (any: "required"; tool: the named
// function), disable_parallel_tool_use as parallel_tool_calls.
maybe_error anthropic_tool_choice(const value& body, value& chat) {
  const value* tc = find_field(body, "tool_choice");
  if (!tc || tc->is_null()) return std::nullopt;
  const value* type = tc->is_object() ? tc->find("type") : nullptr;
  if (!type || !type->is_string())
    return bad("'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}",
               "tool_choice");
  const std::string& t = type->as_string();
  if (t == "auto" || t == "none") {
    chat["tool_choice"] = value(t);
  } else if (t == "any") {
    chat["tool_choice"] = value("required");
  } else if (t == "tool") {
    const value* name = tc->find("name");
    if (!name || !name->is_string())
      return bad("'tool_choice' of type 'tool' needs a 'name'", "tool_choice");
    chat["tool_choice"] = named_tool_choice(*name);
  } else {
    return bad("'tool_choice.type' must be auto, any, tool or none", "tool_choice");
  }
  if (const value* d = tc->find("disable_parallel_tool_use"); d && d->is_bool())
    chat["parallel_tool_calls"] = value(!d->as_bool());
  return std::nullopt;
}

}  // namespace

std::variant<value, api_error> messages_to_chat(const value& body) {
  value chat = json::object{};
  if (auto e = anthropic_messages(body, chat)) return *e;
  const value* mt = find_field(body, "max_tokens");
  if (!mt || mt->is_null()) return bad("'max_tokens' is required", "max_tokens");
  chat["max_tokens"] = *mt;
  constexpr declared_field k_copied[] = {"temperature", "top_p", "top_k", "stream"};
  for (declared_field k : k_copied) copy_field(body, k, chat);
  copy_field(body, "stop_sequences", chat, "stop");
  if (auto e = thinking_switch(body, chat)) return *e;
  if (auto e = anthropic_tools(body, chat)) return *e;
  if (auto e = anthropic_tool_choice(body, chat)) return *e;
  return chat;
}

std::string messages_param(const std::string& p) {
  return rename_prefix(p, {{"stop", "stop_sequences"}});
}

std::string anthropic_error_json(const api_error& e) {
  const char* type = "invalid_request_error";
  switch (e.status) {
    case 401:
      type = "authentication_error";
      break;
    case 403:
      type = "permission_error";
      break;
    case 404:
      type = "not_found_error";
      break;
    case 413:
      type = "request_too_large";
      break;
    case 429:
      type = "rate_limit_error";
      break;
    case 503:
      type = "overloaded_error";
      break;
    default:
      if (e.status >= 500) type = "api_error";
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

std::string sse_named_event(std::string_view event, const json::value& data) {
  std::string out = "event: ";
  out += event;
  out += "\ndata: ";
  json::dump_compact(data, out);
  out += "\n\n";
  return out;
}

}  // namespace coserve::http
