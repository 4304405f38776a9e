// Request parsing for /v1/completions and /v1/chat/completions. Over 500 lines: one reader per
// group of fields (prompt, messages, sampling, structured outputs, tools), all sharing the same
// typed readers and error builders; split by group, those helpers would move to a header of their
// own and the groups still call into each other (tool_choice builds a structured-output grammar).
#include "http/openai_request.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "http/request_fields.hpp"

namespace coserve::http {

namespace {

using json::value;

api_error type_error(const std::string& field, const char* expected) {
  return api_error::bad_request("'" + field + "' must be " + expected, field);
}

api_error range_error(const std::string& field, const std::string& rule) {
  return api_error::bad_request("'" + field + "' " + rule, field);
}

// Each reader leaves `out` untouched when the field is absent or null.
std::optional<api_error> read_number(const value& body, declared_field field, double lo, double hi,
                                     bool lo_open, float& out) {
  const value* v = find_field(body, field);
  if (!v || v->is_null()) return std::nullopt;
  if (!v->is_number()) return type_error(field, "a number");
  double d = v->as_double();
  if (!std::isfinite(d) || d > hi || d < lo || (lo_open && d <= lo)) {
    char rule[96];
    std::snprintf(rule, sizeof rule, "must be in %s%g, %g], got %g", lo_open ? "(" : "[", lo, hi,
                  d);
    return range_error(field, rule);
  }
  out = static_cast<float>(d);
  return std::nullopt;
}

std::optional<api_error> read_int(const value& body, declared_field field, int64_t lo, int64_t hi,
                                  std::optional<int64_t>& out) {
  const value* v = find_field(body, field);
  if (!v || v->is_null()) return std::nullopt;
  if (!v->is_int()) return type_error(field, "an integer");
  int64_t i = v->as_int();
  if (i < lo || i > hi)
    return range_error(field, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                  "], got " + std::to_string(i));
  out = i;
  return std::nullopt;
}

std::optional<api_error> read_bool(const value& body, declared_field field, bool& out) {
  const value* v = find_field(body, field);
  if (!v || v->is_null()) return std::nullopt;
  if (!v->is_bool()) return type_error(field, "a boolean");
  out = v->as_bool();
  return std::nullopt;
}

std::optional<api_error> read_token_ids(const value& v, const std::string& field, int32_t vocab,
                                        std::vector<int32_t>& out) {
  if (!v.is_array()) return type_error(field, "an array of token ids");
  out.clear();
  for (const auto& x : v.as_array()) {
    if (!x.is_int()) return type_error(field, "an array of integer token ids");
    int64_t id = x.as_int();
    if (id < 0 || id >= vocab)
      return range_error(field, "holds token id " + std::to_string(id) +
                                    " outside the vocabulary [0, " + std::to_string(vocab) + ")");
    out.push_back(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

std::optional<api_error> read_prompt(const value& body, int32_t vocab, openai_request& r) {
  const value* p = find_field(body, "prompt");
  if (!p || p->is_null()) return api_error::bad_request("'prompt' is required", "prompt");
  if (p->is_string()) {
    r.prompts.emplace_back(p->as_string());
    return std::nullopt;
  }
  if (!p->is_array()) return type_error("prompt", "a string, an array of strings or token ids");
  const auto& a = p->as_array();
  if (a.empty()) return api_error::bad_request("'prompt' must not be empty", "prompt");
  if (a.front().is_int()) {
    std::vector<int32_t> ids;
    if (auto e = read_token_ids(*p, "prompt", vocab, ids)) return e;
    r.prompts.emplace_back(std::move(ids));
    return std::nullopt;
  }
  for (const auto& x : a) {
    if (x.is_string()) {
      r.prompts.emplace_back(x.as_string());
    } else if (x.is_array()) {
      std::vector<int32_t> ids;
      if (auto e = read_token_ids(x, "prompt", vocab, ids)) return e;
      if (ids.empty())
        return api_error::bad_request("'prompt' must not hold an empty list", "prompt");
      r.prompts.emplace_back(std::move(ids));
    } else {
      return type_error("prompt", "a string, an array of strings or token ids");
    }
  }
  return std::nullopt;
}

// Chat content may be a string or a list of {type:"text", text}; lists are flattened to one string
// (joined by "\n") so every template sees the form it expects.
std::optional<api_error> read_messages(const value& body, openai_request& r) {
  const value* m = find_field(body, "messages");
  if (!m || m->is_null()) return api_error::bad_request("'messages' is required", "messages");
  if (!m->is_array()) return type_error("messages", "an array of messages");
  if (m->as_array().empty())
    return api_error::bad_request("'messages' must not be empty", "messages");
  value out = json::array{};
  for (const auto& msg : m->as_array()) {
    if (!msg.is_object()) return type_error("messages", "an array of objects");
    const value* role = msg.find("role");
    if (!role || !role->is_string()) return type_error("messages", "objects with a string 'role'");
    value copy = msg;
    if (const value* c = msg.find("content"); c && !c->is_null() && !c->is_string()) {
      if (!c->is_array())
        return type_error("messages", "objects whose 'content' is a string or a list of parts");
      std::string text;
      bool first = true;
      for (const auto& part : c->as_array()) {
        const value* type = part.is_object() ? part.find("type") : nullptr;
        const value* t = part.is_object() ? part.find("text") : nullptr;
        if (!type || !type->is_string() || type->as_string() != "text" || !t || !t->is_string())
          return api_error::bad_request(
              "only content parts of type 'text' with a string 'text' are supported", "messages");
        if (!first) text += "\n";
        text += t->as_string();
        first = false;
      }
      copy["content"] = value(std::move(text));
    }
    out.push_back(std::move(copy));
  }
  r.chat_in.messages = std::move(out);
  if (const value* tools = find_field(body, "tools"); tools && !tools->is_null()) {
    if (!tools->is_array()) return type_error("tools", "an array");
    r.chat_in.tools = *tools;
  }
  if (const value* kw = find_field(body, "chat_template_kwargs"); kw && !kw->is_null()) {
    if (!kw->is_object()) return type_error("chat_template_kwargs", "an object");
    r.chat_in.template_kwargs = *kw;
  }
  if (auto e = read_bool(body, "add_generation_prompt", r.chat_in.add_generation_prompt)) return e;
  if (auto e = read_bool(body, "continue_final_message", r.chat_in.continue_final_message))
    return e;
  // vLLM's rule (add_generation_prompt defaults to true there too).
  if (r.chat_in.continue_final_message && r.chat_in.add_generation_prompt)
    return api_error::bad_request(
        "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
        "continue_final_message");
  // OpenAI's reasoning_effort reaches the template as a variable (gpt-oss templates read it),
  // unless chat_template_kwargs sets one.
  if (const value* re = find_field(body, "reasoning_effort"); re && !re->is_null()) {
    static constexpr const char* k_efforts[] = {"none", "minimal", "low", "medium", "high"};
    if (!re->is_string() || std::none_of(std::begin(k_efforts), std::end(k_efforts),
                                         [&](const char* x) { return re->as_string() == x; }))
      return type_error("reasoning_effort", "one of 'none', 'minimal', 'low', 'medium', 'high'");
    if (!r.chat_in.template_kwargs.is_object()) r.chat_in.template_kwargs = json::object{};
    if (!r.chat_in.template_kwargs.find("reasoning_effort"))
      r.chat_in.template_kwargs["reasoning_effort"] = *re;
  }
  return std::nullopt;
}

// vLLM's chat_template request field (or chat_template_kwargs.chat_template): the request's own
// template, taken only when the server trusts request templates, else refused as vLLM refuses it.
std::optional<api_error> read_request_template(const value& body, const model_limits& lim,
                                               openai_request& r) {
  const value* given = find_field(body, "chat_template");
  std::string param = "chat_template";
  if (given && given->is_null()) given = nullptr;
  json::object* kwargs =
      r.chat_in.template_kwargs.is_object() ? &r.chat_in.template_kwargs.as_object() : nullptr;
  auto in_kwargs = kwargs ? std::find_if(kwargs->begin(), kwargs->end(),
                                         [](const auto& kv) { return kv.first == "chat_template"; })
                          : json::object::iterator{};
  if (!given && kwargs && in_kwargs != kwargs->end() && !in_kwargs->second.is_null()) {
    given = &in_kwargs->second;
    param = "chat_template_kwargs";
  }
  if (!given) return std::nullopt;
  if (!lim.trust_request_chat_template)
    return api_error::bad_request(
        "Chat template is passed with request, but --trust-request-chat-template is not "
        "set. Refused request with untrusted chat template.",
        param);
  if (!given->is_string() || given->as_string().empty())
    return type_error(param, "a non-empty string");
  r.chat_in.template_source = given->as_string();
  if (kwargs && in_kwargs != kwargs->end())
    kwargs->erase(in_kwargs);  // the template, not a variable
  return std::nullopt;
}

constexpr int64_t k_max_logprobs = 20;

std::optional<api_error> read_sampling(const value& body, const model_limits& lim,
                                       openai_request& r) {
  auto& p = r.params;
  // The server's defaults first (vLLM's --generation-config); the request's fields replace them.
  const sampling_defaults& d = lim.defaults;
  if (d.temperature) p.temperature = *d.temperature;
  if (d.top_p) p.top_p = *d.top_p;
  if (d.top_k) p.top_k = *d.top_k;
  if (d.min_p) p.min_p = *d.min_p;
  if (d.repetition_penalty) p.repetition_penalty = *d.repetition_penalty;
  if (d.max_tokens && r.chat) r.default_max_tokens = *d.max_tokens;
  if (auto e = read_number(body, "temperature", 0.0, 2.0, false, p.temperature)) return e;
  if (auto e = read_number(body, "top_p", 0.0, 1.0, true, p.top_p)) return e;
  if (auto e = read_number(body, "min_p", 0.0, 1.0, false, p.min_p)) return e;
  if (auto e = read_number(body, "presence_penalty", -2.0, 2.0, false, p.presence_penalty))
    return e;
  if (auto e = read_number(body, "frequency_penalty", -2.0, 2.0, false, p.frequency_penalty))
    return e;
  if (auto e = read_number(body, "repetition_penalty", 0.0, 2.0, true, p.repetition_penalty))
    return e;
  std::optional<int64_t> i;
  if (auto e = read_int(body, "top_k", -1, std::numeric_limits<int32_t>::max(), i)) return e;
  if (i) p.top_k = static_cast<int32_t>(*i);
  i.reset();
  if (auto e = read_int(body, "n", 1, 128, i)) return e;
  if (i) p.n = static_cast<int32_t>(*i);
  i.reset();
  if (auto e = read_int(body, "seed", std::numeric_limits<int64_t>::min(),
                        std::numeric_limits<int64_t>::max(), i))
    return e;
  if (i) p.seed = static_cast<uint64_t>(*i);
  i.reset();
  if (const value* salt = find_field(body, "cache_salt"); salt && !salt->is_null()) {
    if (!salt->is_string() || salt->as_string().empty())  // vLLM's message
      return api_error::bad_request(
          "Parameter 'cache_salt' must be a non-empty string if provided.", "cache_salt");
    p.cache_salt = cache_salt_hash(salt->as_string());
  }
  if (auto e = read_int(body, "min_tokens", 0, std::numeric_limits<int32_t>::max(), i)) return e;
  if (i) p.min_tokens = static_cast<int32_t>(*i);
  for (declared_field field :
       {declared_field("max_completion_tokens"), declared_field("max_tokens")}) {
    i.reset();
    if (auto e = read_int(body, field, 1, std::numeric_limits<int32_t>::max(), i)) return e;
    if (i) {
      p.max_tokens = static_cast<int32_t>(*i);
      r.max_tokens_given = true;
      r.max_tokens_param = field.name;
    }
  }
  if (r.max_tokens_given && p.min_tokens > p.max_tokens)  // vLLM's SamplingParams check
    return api_error::bad_request(
        "min_tokens must be less than or equal to max_tokens=" + std::to_string(p.max_tokens) +
            ", got " + std::to_string(p.min_tokens) + ".",
        "min_tokens");
  if (auto e = read_bool(body, "ignore_eos", p.ignore_eos)) return e;
  if (auto e = read_bool(body, "skip_special_tokens", p.skip_special_tokens)) return e;
  if (auto e = read_bool(body, "include_stop_str_in_output", p.include_stop_str_in_output))
    return e;

  if (const value* s = find_field(body, "stop"); s && !s->is_null()) {
    if (s->is_string()) {
      if (!s->as_string().empty()) p.stop.push_back(s->as_string());
    } else if (s->is_array()) {
      for (const auto& x : s->as_array()) {
        if (!x.is_string()) return type_error("stop", "a string or an array of strings");
        if (!x.as_string().empty()) p.stop.push_back(x.as_string());
      }
    } else {
      return type_error("stop", "a string or an array of strings");
    }
  }
  if (const value* s = find_field(body, "stop_token_ids"); s && !s->is_null())
    if (auto e = read_token_ids(*s, "stop_token_ids", lim.vocab_size, p.stop_token_ids)) return e;
  if (const value* s = find_field(body, "allowed_token_ids"); s && !s->is_null()) {
    if (auto e = read_token_ids(*s, "allowed_token_ids", lim.vocab_size, p.allowed_token_ids))
      return e;
    if (p.allowed_token_ids.empty())
      return api_error::bad_request("'allowed_token_ids' must hold at least one token id",
                                    "allowed_token_ids");
  }

  if (const value* lb = find_field(body, "logit_bias"); lb && !lb->is_null()) {
    if (!lb->is_object()) return type_error("logit_bias", "an object mapping token ids to numbers");
    for (const auto& [key, bias] : lb->as_object()) {
      char* end = nullptr;
      long long id = key.empty() ? -1 : std::strtoll(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || id < 0 || id >= lim.vocab_size)
        return api_error::bad_request("'logit_bias' key '" + key + "' is not a token id in [0, " +
                                          std::to_string(lim.vocab_size) + ")",
                                      "logit_bias");
      if (!bias.is_number() || bias.as_double() < -100.0 || bias.as_double() > 100.0)
        return range_error("logit_bias", "values must be numbers in [-100, 100]");
      p.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(bias.as_double()));
    }
  }

  if (r.chat) {
    if (auto e = read_bool(body, "logprobs", r.chat_logprobs)) return e;
    i.reset();
    if (auto e = read_int(body, "top_logprobs", 0, k_max_logprobs, i)) return e;
    if (i && !r.chat_logprobs)
      return api_error::bad_request("'top_logprobs' needs 'logprobs' set to true", "top_logprobs");
    if (r.chat_logprobs) p.logprobs = i ? static_cast<int32_t>(*i) : 0;
  } else {
    i.reset();
    if (const value* lp = find_field(body, "logprobs"); lp && lp->is_bool())
      return type_error("logprobs", "an integer (the number of top logprobs)");
    if (auto e = read_int(body, "logprobs", 0, k_max_logprobs, i)) return e;
    if (i) p.logprobs = static_cast<int32_t>(*i);
  }
  return std::nullopt;
}

// A JSON schema given as an object (or `true`), or as a string holding one: the schema text.
std::optional<api_error> read_schema(const value& v, const std::string& field, std::string& out) {
  if (v.is_string()) {
    auto parsed = json::parse(v.as_string());
    if (!parsed)
      return api_error::bad_request("'" + field + "' is not valid JSON: " + parsed.err().message,
                                    field);
    if (!parsed->is_object() && !parsed->is_bool())
      return type_error(field, "a JSON schema (an object)");
    out = json::dump(*parsed);
    return std::nullopt;
  }
  if (!v.is_object() && !v.is_bool()) return type_error(field, "a JSON schema (an object)");
  out = json::dump(v);
  return std::nullopt;
}

std::optional<api_error> read_choices(const value& v, const std::string& field,
                                      std::vector<std::string>& out) {
  if (!v.is_array() || v.as_array().empty())
    return type_error(field, "a non-empty array of strings");
  for (const auto& c : v.as_array()) {
    if (!c.is_string() || c.as_string().empty())
      return type_error(field, "a non-empty array of non-empty strings");
    out.push_back(c.as_string());
  }
  return std::nullopt;
}

std::optional<api_error> read_text(const value& v, const std::string& field, std::string& out) {
  if (!v.is_string() || v.as_string().empty()) return type_error(field, "a non-empty string");
  out = v.as_string();
  return std::nullopt;
}

// The structured-output spellings a request gave, each setting the request's grammar; more
// than one is refused once all are read.
struct structured_given {
  openai_request& r;
  std::vector<std::string> params;  // the field of each spelling given
  void set(grammar_spec spec) {
    params.push_back(spec.param);
    r.structured = std::move(spec);
  }
};

// response_format: {"type": "text" | "json_object" | "json_schema", "json_schema": {name, schema,
// strict}}.
std::optional<api_error> read_response_format(const value& body, structured_given& given) {
  const value* rf = find_field(body, "response_format");
  if (!rf || rf->is_null()) return std::nullopt;
  if (!rf->is_object()) return type_error("response_format", "an object");
  const value* type = rf->find("type");
  if (!type || !type->is_string())
    return api_error::bad_request(
        "'response_format.type' is required: one of 'text', 'json_object', 'json_schema'",
        "response_format.type");
  const std::string& t = type->as_string();
  if (t == "text") return std::nullopt;
  if (t == "json_object") {
    grammar_spec g;
    g.type = grammar_spec::kind::json_object;
    g.param = "response_format";
    given.set(std::move(g));
    return std::nullopt;
  }
  if (t != "json_schema")
    return api_error::bad_request(
        "'response_format.type' must be one of 'text', 'json_object', 'json_schema' (got '" + t +
            "')",
        "response_format.type");
  const value* js = rf->find("json_schema");
  if (!js || js->is_null())
    return api_error::bad_request(
        "'response_format.json_schema' is required when the type is 'json_schema'",
        "response_format.json_schema");
  if (!js->is_object()) return type_error("response_format.json_schema", "an object");
  const value* name = js->find("name");
  if (!name || !name->is_string() || name->as_string().empty())
    return api_error::bad_request(
        "'response_format.json_schema.name' is required (a non-empty string)",
        "response_format.json_schema.name");
  grammar_spec g;
  g.type = grammar_spec::kind::json_schema;
  g.param = "response_format.json_schema.schema";
  const value* schema = js->find("schema");
  if (!schema || schema->is_null())
    return api_error::bad_request("'response_format.json_schema.schema' is required", g.param);
  if (auto e = read_schema(*schema, g.param, g.text)) return e;
  if (const value* strict = js->find("strict"); strict && !strict->is_null() && !strict->is_bool())
    return type_error("response_format.json_schema.strict", "a boolean");
  given.set(std::move(g));
  return std::nullopt;
}

// One key of structured_outputs: a spelling (set into `g`; false: nothing to set), an option
// (false), or an error.
std::variant<bool, api_error> read_structured_key(const std::string& key, const value& v,
                                                  grammar_spec& g) {
  std::optional<api_error> e;
  if (key == "json") {
    g.type = grammar_spec::kind::json_schema;
    e = read_schema(v, g.param, g.text);
  } else if (key == "regex") {
    g.type = grammar_spec::kind::regex;
    e = read_text(v, g.param, g.text);
  } else if (key == "choice") {
    g.type = grammar_spec::kind::choice;
    e = read_choices(v, g.param, g.choices);
  } else if (key == "grammar") {
    g.type = grammar_spec::kind::grammar;
    e = read_text(v, g.param, g.text);
  } else if (key == "json_object") {
    if (!v.is_bool()) return type_error(g.param, "a boolean");
    g.type = grammar_spec::kind::json_object;
    return v.as_bool();
  } else if (key == "disable_any_whitespace" || key == "disable_fallback" ||
             key == "disable_additional_properties" || key == "whitespace_pattern" ||
             key == "backend") {
    return false;  // options (the grammar engine is always xgrammar; its whitespace rule applies)
  } else if (key == "structural_tag") {
    return api_error::bad_request("'structured_outputs.structural_tag' is not supported", g.param);
  } else {
    return api_error::bad_request("unknown field 'structured_outputs." + key + "'", g.param);
  }
  if (e) return *e;
  return true;
}

// structured_outputs: {"json" | "regex" | "choice" | "grammar" | "json_object": ...,
// "disable_any_whitespace"}; `any_whitespace` becomes false with disable_any_whitespace.
std::optional<api_error> read_structured_outputs(const value& body, structured_given& given,
                                                 bool& any_whitespace) {
  const value* so = find_field(body, "structured_outputs");
  if (!so || so->is_null()) return std::nullopt;
  if (!so->is_object()) return type_error("structured_outputs", "an object");
  if (const value* d = so->find("disable_any_whitespace"); d && !d->is_null()) {
    if (!d->is_bool()) return type_error("structured_outputs.disable_any_whitespace", "a boolean");
    any_whitespace = !d->as_bool();
  }
  const size_t before = given.params.size();
  for (const auto& [key, v] : so->as_object()) {
    if (v.is_null()) continue;
    grammar_spec g;
    g.param = "structured_outputs." + key;
    auto read = read_structured_key(key, v, g);
    if (auto* e = std::get_if<api_error>(&read)) return *e;
    if (std::get<bool>(read)) given.set(std::move(g));
  }
  if (given.params.size() == before)  // vLLM refuses it too
    return api_error::bad_request(
        "'structured_outputs' must give one of json, regex, choice, grammar or json_object",
        "structured_outputs");
  return std::nullopt;
}

// guided_json / guided_regex / guided_choice / guided_grammar (vLLM's older names).
std::optional<api_error> read_guided(const value& body, structured_given& given) {
  struct alias {
    declared_field field;
    grammar_spec::kind type;
  };
  constexpr alias k_aliases[] = {{"guided_json", grammar_spec::kind::json_schema},
                                 {"guided_regex", grammar_spec::kind::regex},
                                 {"guided_choice", grammar_spec::kind::choice},
                                 {"guided_grammar", grammar_spec::kind::grammar}};
  for (const alias& a : k_aliases) {
    const value* v = find_field(body, a.field);
    if (!v || v->is_null()) continue;
    grammar_spec g;
    g.type = a.type;
    g.param = std::string(a.field.name);
    std::optional<api_error> e;
    if (a.type == grammar_spec::kind::json_schema)
      e = read_schema(*v, g.param, g.text);
    else if (a.type == grammar_spec::kind::choice)
      e = read_choices(*v, g.param, g.choices);
    else
      e = read_text(*v, g.param, g.text);
    if (e) return e;
    given.set(std::move(g));
  }
  return std::nullopt;
}

// Structured output, in any of the spellings clients use (at most one per request):
// response_format, structured_outputs, or a guided_* alias.
std::optional<api_error> read_structured(const value& body, openai_request& r) {
  structured_given given{r, {}};
  bool any_whitespace = true;
  if (auto e = read_response_format(body, given)) return e;
  if (auto e = read_structured_outputs(body, given, any_whitespace)) return e;
  if (auto e = read_guided(body, given)) return e;
  if (given.params.size() > 1)
    return api_error::bad_request(
        "only one kind of structured output may be given per request (got '" + given.params[0] +
            "' and '" + given.params[1] + "')",
        given.params[1]);
  if (r.structured) r.structured->any_whitespace = any_whitespace;
  return std::nullopt;
}

// tools (chat_in.tools, an array already) and tool_choice / parallel_tool_calls.
std::optional<api_error> read_tools(const value& body, const model_limits& lim, openai_request& r) {
  const value& tools = r.chat_in.tools;
  std::vector<std::string> names;
  if (tools.is_array()) {
    for (const auto& t : tools.as_array()) {
      if (!t.is_object()) return type_error("tools", "an array of objects");
      if (const value* type = t.find("type");
          type && !(type->is_string() && type->as_string() == "function"))
        return api_error::bad_request("'tools' entries must have type 'function'", "tools");
      const value* f = t.find("function");
      const value* name = f && f->is_object() ? f->find("name") : nullptr;
      if (!name || !name->is_string() || name->as_string().empty())
        return api_error::bad_request(
            "'tools' entries need a 'function' with a non-empty string 'name'", "tools");
      if (const value* params = f->find("parameters");
          params && !params->is_null() && !params->is_object())
        return type_error("tools", "entries whose function 'parameters' is a JSON schema object");
      names.push_back(name->as_string());
    }
  }
  if (auto e = read_bool(body, "parallel_tool_calls", r.parallel_tool_calls)) return e;
  const value* tc = find_field(body, "tool_choice");
  if (tc && !tc->is_null()) {
    if (tc->is_string()) {
      const std::string& c = tc->as_string();
      if (c == "none")
        r.tools = tool_mode::none;
      else if (c == "auto")
        r.tools = tool_mode::automatic;
      else if (c == "required")
        r.tools = tool_mode::required;
      else
        return api_error::bad_request(
            "'tool_choice' must be 'none', 'auto', 'required' or a named function (got '" + c +
                "')",
            "tool_choice");
    } else if (tc->is_object()) {
      const value* f = tc->find("function");
      const value* name = f && f->is_object() ? f->find("name") : nullptr;
      if (!name || !name->is_string())
        return api_error::bad_request(
            "'tool_choice' must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
            "tool_choice");
      r.tools = tool_mode::named;
      r.tool_name = name->as_string();
    } else {
      return type_error("tool_choice", "a string or an object");
    }
    if (r.tools != tool_mode::none && names.empty())
      return api_error::bad_request("when 'tool_choice' is given, 'tools' must be set",
                                    "tool_choice");
  } else {
    r.tools = names.empty() ? tool_mode::none : tool_mode::automatic;
  }
  switch (r.tools) {
    case tool_mode::none:
      return std::nullopt;
    case tool_mode::automatic:
      if (!lim.enable_auto_tool_choice || lim.tool_call_parser == nullptr)
        return api_error::bad_request(
            "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be "
            "set (or pass tool_choice \"none\", \"required\" or a named function)",
            "tool_choice");
      return std::nullopt;
    case tool_mode::required:
    case tool_mode::named:
      break;
  }
  if (r.structured)
    return api_error::bad_request(
        "tool_choice '" + std::string(r.tools == tool_mode::named ? "function" : "required") +
            "' cannot be combined with '" + r.structured->param + "'",
        "tool_choice");
  grammar_spec g;
  g.type = grammar_spec::kind::json_schema;
  g.param = "tool_choice";
  g.any_whitespace = false;  // calls in the compact form models are trained on
  if (r.tools == tool_mode::required) {
    g.text = required_tool_calls_schema(tools, r.parallel_tool_calls);
  } else {
    const value* fn = nullptr;
    for (const auto& t : tools.as_array())
      if (const value* f = t.find("function"); f && f->find("name")->as_string() == r.tool_name)
        fn = f;
    if (!fn)
      return api_error::bad_request(
          "tool '" + r.tool_name + "' named in 'tool_choice' is not in 'tools'", "tool_choice");
    const value* params = fn->find("parameters");
    g.text =
        params && params->is_object() ? json::dump(*params) : std::string(R"({"type": "object"})");
  }
  r.structured = std::move(g);
  return std::nullopt;
}

// prompt_logprobs (and echo + logprobs), best_of, and suffix, which is not implemented: a 400
// naming the field rather than an answer that silently lacks it. (An executor that does not
// compute prompt logprobs is refused by the engine.)
std::optional<api_error> read_extra_fields(const value& body, bool chat, openai_request& r) {
  auto unsupported = [](const char* field, const std::string& why) {
    return api_error::bad_request("'" + std::string(field) + "' " + why, field);
  };
  // Prompt logprobs: vLLM's prompt_logprobs, and what echo + logprobs return for the prompt.
  std::optional<int64_t> pl;
  if (auto e = read_int(body, "prompt_logprobs", 0, k_max_logprobs, pl)) return e;
  const bool echo_logprobs = !chat && r.echo && r.params.logprobs >= 0;
  if (pl || echo_logprobs) {
    const char* field = pl ? "prompt_logprobs" : "logprobs";
    if (r.stream)
      return unsupported(field, pl ? "is not available when 'stream' is true"
                                   : "with 'echo' is not available when 'stream' is true");
    r.prompt_logprobs_field = pl.has_value();
    r.params.prompt_logprobs =
        std::max<int32_t>(pl ? int32_t(*pl) : 0, echo_logprobs ? r.params.logprobs : 0);
  }
  if (!chat)
    if (const value* sx = find_field(body, "suffix"); sx && !sx->is_null()) {
      if (!sx->is_string()) return type_error("suffix", "a string");
      return unsupported("suffix", "is not supported");
    }
  // vLLM's extensions that change what is generated and are not implemented: a 400 naming the
  // field, not an answer without them.
  if (const value* bw = find_field(body, "bad_words"); bw && !bw->is_null()) {
    if (!bw->is_array()) return type_error("bad_words", "an array of strings");
    if (!bw->as_array().empty()) return unsupported("bad_words", "is not supported");
  }
  if (const value* bs = find_field(body, "use_beam_search"); bs && !bs->is_null()) {
    if (!bs->is_bool()) return type_error("use_beam_search", "a boolean");
    if (bs->as_bool()) return unsupported("use_beam_search", "is not supported");
  }
  std::optional<int64_t> best_of;
  if (auto e = read_int(body, "best_of", 1, 128, best_of)) return e;
  if (best_of && *best_of < r.params.n)
    return api_error::bad_request("'best_of' must be greater than or equal to 'n'", "best_of");
  if (best_of && *best_of > r.params.n) {
    // OpenAI's legacy semantics: best_of samples, the n best by log-probability per token returned.
    if (r.stream)
      return unsupported("best_of", "greater than 'n' is not available when 'stream' is true");
    r.returned = r.params.n;
    r.params.n = int32_t(*best_of);
    if (r.params.logprobs < 0) {
      r.params.logprobs = 0;
      r.logprobs_for_ranking = true;
    }
  }
  return std::nullopt;
}

}  // namespace

std::variant<json::value, api_error> parse_json_object(std::string_view body) {
  auto parsed = json::parse(body);
  if (!parsed) return api_error::bad_request("malformed JSON body: " + parsed.err().message);
  if (!parsed->is_object()) return api_error::bad_request("the request body must be a JSON object");
  return std::move(parsed).value();
}

std::variant<openai_request, api_error> parse_openai_request(std::string_view text, bool chat,
                                                             const model_limits& lim) {
  auto parsed = parse_json_object(text);
  if (auto* e = std::get_if<api_error>(&parsed)) return std::move(*e);
  const value& body = std::get<value>(parsed);
  openai_request r;
  r.chat = chat;
  if (const value* m = find_field(body, "model"); m && !m->is_null()) {
    if (!m->is_string()) return type_error("model", "a string");
    r.model = m->as_string();
    if (!r.model.empty() && !lim.serves(r.model))
      return api_error{404, "The model `" + r.model + "` does not exist.", "NotFoundError", "model",
                       "model_not_found"};
  }
  if (auto e = chat ? read_messages(body, r) : read_prompt(body, lim.vocab_size, r)) return *e;
  if (chat)
    if (auto e = read_request_template(body, lim, r)) return *e;
  if (auto e = read_sampling(body, lim, r)) return *e;
  r.params.lora_id = lim.lora_id(r.model);
  if (auto e = read_structured(body, r)) return *e;
  if (chat)
    if (auto e = read_tools(body, lim, r)) return *e;
  if (auto e = read_bool(body, "stream", r.stream)) return *e;
  if (auto e = read_bool(body, "echo", r.echo)) return *e;
  if (chat && r.echo) {
    const auto& msgs = r.chat_in.messages.as_array();
    const value* role = msgs.back().find("role");
    const value* content = msgs.back().find("content");
    if (role && role->as_string() == "assistant" && content && content->is_string())
      r.chat_echo = content->as_string();
  }
  if (const value* so = find_field(body, "stream_options"); so && !so->is_null()) {
    if (!so->is_object()) return type_error("stream_options", "an object");
    if (!r.stream)
      return api_error::bad_request("'stream_options' is only allowed when 'stream' is true",
                                    "stream_options");
    if (const value* iu = so->find("include_usage"); iu && !iu->is_null()) {
      if (!iu->is_bool()) return type_error("stream_options.include_usage", "a boolean");
      r.include_usage = iu->as_bool();
    }
    if (const value* cu = so->find("continuous_usage_stats"); cu && !cu->is_null()) {
      if (!cu->is_bool()) return type_error("stream_options.continuous_usage_stats", "a boolean");
      r.continuous_usage = cu->as_bool() && r.include_usage;  // vLLM: with include_usage only
    }
  }
  if (const value* u = find_field(body, "user"); u && !u->is_null()) {
    if (!u->is_string()) return type_error("user", "a string");
    r.user = u->as_string();
  }
  if (auto e = read_bool(body, "return_tokens_as_token_ids", r.tokens_as_ids)) return *e;
  if (const value* tp = find_field(body, "truncate_prompt_tokens"); tp && !tp->is_null()) {
    if (!tp->is_number() || tp->as_double() != std::floor(tp->as_double()) ||
        !(tp->as_double() == -1 || tp->as_double() >= 1))
      return type_error("truncate_prompt_tokens", "-1 or a positive integer");
    if (tp->as_double() > double(lim.max_model_len))
      return api_error::bad_request(
          "truncate_prompt_tokens value (" + std::to_string(int64_t(tp->as_double())) +
              ") is greater than max_model_len (" + std::to_string(lim.max_model_len) +
              "). Please select a smaller truncation size.",
          "truncate_prompt_tokens");
    r.truncate_prompt_tokens = int32_t(tp->as_double());
  }
  if (auto e = read_extra_fields(body, chat, r)) return *e;
  if (!r.max_tokens_given) r.max_tokens_param = "max_tokens";
  return r;
}

context_rule context_of(const openai_request& req) {
  context_rule rule;
  rule.max_tokens_given = req.max_tokens_given;
  // OpenAI's completions default; chat: the rest of the context, or the generation config's.
  rule.default_max_tokens = req.chat ? req.default_max_tokens : 16;
  rule.input_param = req.chat ? "messages" : "prompt";
  rule.max_tokens_param = req.max_tokens_param.empty() ? "max_tokens" : req.max_tokens_param;
  rule.truncate_prompt_tokens = req.truncate_prompt_tokens;
  return rule;
}

std::optional<api_error> check_context(openai_request& req, int32_t prompt_tokens,
                                       const model_limits& lim) {
  auto r = apply_context_rule(context_of(req), prompt_tokens, lim.max_model_len, req.params);
  if (r.ok()) return std::nullopt;
  return api_error::bad_request(r.err().message, r.err().param);
}

std::optional<api_error> read_chat_input(const value& body, const model_limits& limits,
                                         chat_input& out) {
  openai_request r;
  r.chat_in = std::move(out);
  if (auto e = read_messages(body, r)) return e;
  if (auto e = read_request_template(body, limits, r)) return e;
  out = std::move(r.chat_in);
  return std::nullopt;
}

}  // namespace coserve::http
