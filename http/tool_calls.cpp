#include "http/tool_calls.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <mutex>
#include <random>

namespace coserve::http {

namespace {

using json::value;
constexpr std::string_view k_blank = " \t\r\n";

std::string_view trim(std::string_view s) {
  const size_t b = s.find_first_not_of(k_blank);
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(k_blank);
  return s.substr(b, e - b + 1);
}

// End (one past) of the JSON value starting at `pos` (after blanks), or npos when the text holds
// no complete value there. Objects, arrays and strings are matched by structure; scalars run to
// the next delimiter.
size_t json_value_end(std::string_view s, size_t pos) {
  pos = s.find_first_not_of(k_blank, pos);
  if (pos == std::string_view::npos) return pos;
  const char c = s[pos];
  if (c == '{' || c == '[') {
    int depth = 0;
    bool in_str = false;
    for (size_t i = pos; i < s.size(); ++i) {
      const char ch = s[i];
      if (in_str) {
        if (ch == '\\')
          ++i;
        else if (ch == '"')
          in_str = false;
        continue;
      }
      if (ch == '"')
        in_str = true;
      else if (ch == '{' || ch == '[')
        ++depth;
      else if ((ch == '}' || ch == ']') && --depth == 0)
        return i + 1;
    }
    return std::string_view::npos;
  }
  if (c == '"') {
    for (size_t i = pos + 1; i < s.size(); ++i) {
      if (s[i] == '\\')
        ++i;
      else if (s[i] == '"')
        return i + 1;
    }
    return std::string_view::npos;
  }
  size_t i = pos;
  while (i < s.size() && std::string_view(",;]} \t\r\n").find(s[i]) == std::string_view::npos) ++i;
  return i;
}

std::string dump_args(const value& v) { return json::dump(v); }

// {"name": ..., "arguments"|"parameters": {...} or a string holding an object}.
std::optional<tool_call> call_from_object(const value& obj) {
  if (!obj.is_object()) return std::nullopt;
  const value* name = obj.find("name");
  if (!name || !name->is_string() || name->as_string().empty()) return std::nullopt;
  const value* args = obj.find("arguments");
  if (!args) args = obj.find("parameters");
  tool_call c;
  c.id = new_tool_call_id();
  c.name = name->as_string();
  if (!args || args->is_null()) {
    c.arguments = "{}";
  } else if (args->is_object()) {
    c.arguments = dump_args(*args);
  } else if (args->is_string()) {
    auto inner = json::parse(args->as_string());
    if (!inner || !inner->is_object()) return std::nullopt;
    c.arguments = dump_args(*inner);
  } else {
    return std::nullopt;
  }
  return c;
}

parsed_tool_output as_content(std::string_view text) { return {std::string(text), {}}; }

// ---- hermes ----
parsed_tool_output parse_hermes(std::string_view text) {
  constexpr std::string_view open = "<tool_call>", close = "</tool_call>";
  size_t at = text.find(open);
  if (at == std::string_view::npos) return as_content(text);
  parsed_tool_output out;
  out.content =
      std::string(trim(text.substr(0, at)).empty() ? std::string_view() : text.substr(0, at));
  while (at != std::string_view::npos) {
    const size_t body = at + open.size();
    const size_t end = text.find(close, body);
    const std::string_view inner = trim(
        text.substr(body, end == std::string_view::npos ? std::string_view::npos : end - body));
    auto v = json::parse(inner);
    if (!v) return as_content(text);
    auto c = call_from_object(*v);
    if (!c) return as_content(text);
    out.calls.push_back(std::move(*c));
    if (end == std::string_view::npos) break;
    at = text.find(open, end + close.size());
  }
  return out;
}

// ---- llama3_json ----
parsed_tool_output parse_llama3_json(std::string_view text) {
  std::string_view s = trim(text);
  constexpr std::string_view tag = "<|python_tag|>";
  if (s.substr(0, tag.size()) == tag) s = trim(s.substr(tag.size()));
  if (s.empty() || s.front() != '{') return as_content(text);
  parsed_tool_output out;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t end = json_value_end(s, pos);
    if (end == std::string_view::npos) return as_content(text);
    auto v = json::parse(s.substr(pos, end - pos));
    if (!v) return as_content(text);
    auto c = call_from_object(*v);
    if (!c) return as_content(text);
    out.calls.push_back(std::move(*c));
    pos = s.find_first_not_of(" \t\r\n;", end);
    if (pos == std::string_view::npos) break;
    if (s[pos] != '{') return as_content(text);
  }
  return out;
}

// ---- mistral ----
parsed_tool_output parse_mistral(std::string_view text) {
  constexpr std::string_view marker = "[TOOL_CALLS]", args_tag = "[ARGS]";
  const size_t at = text.find(marker);
  if (at == std::string_view::npos) return as_content(text);
  parsed_tool_output out;
  out.content =
      std::string(trim(text.substr(0, at)).empty() ? std::string_view() : text.substr(0, at));
  std::string_view rest = trim(text.substr(at + marker.size()));
  if (!rest.empty() && rest.front() == '[') {  // a JSON array of calls
    const size_t end = json_value_end(rest, 0);
    if (end == std::string_view::npos || !trim(rest.substr(end)).empty()) return as_content(text);
    auto v = json::parse(rest.substr(0, end));
    if (!v || !v->is_array() || v->as_array().empty()) return as_content(text);
    for (const auto& item : v->as_array()) {
      auto c = call_from_object(item);
      if (!c) return as_content(text);
      out.calls.push_back(std::move(*c));
    }
    return out;
  }
  // name[ARGS]{...} (or name{...}), repeated, each optionally after another [TOOL_CALLS].
  while (!rest.empty()) {
    if (rest.substr(0, marker.size()) == marker) rest = trim(rest.substr(marker.size()));
    const size_t brace = rest.find('{');
    if (brace == std::string_view::npos) return as_content(text);
    std::string_view name = rest.substr(0, brace);
    if (const size_t a = name.find(args_tag); a != std::string_view::npos) name = name.substr(0, a);
    name = trim(name);
    if (name.empty() || name.find_first_of(" \t\r\n{}[]\"") != std::string_view::npos)
      return as_content(text);
    const size_t end = json_value_end(rest, brace);
    if (end == std::string_view::npos) return as_content(text);
    auto args = json::parse(rest.substr(brace, end - brace));
    if (!args || !args->is_object()) return as_content(text);
    out.calls.push_back({new_tool_call_id(), std::string(name), dump_args(*args)});
    rest = trim(rest.substr(end));
  }
  if (out.calls.empty()) return as_content(text);
  return out;
}

// ---- pythonic ----
// A recursive-descent reader of Python literals: str, int, float, True/False/None, list, tuple
// (as a list) and dict.
class py_reader {
 public:
  explicit py_reader(std::string_view s) : s_(s) {}
  void blank() {
    while (i_ < s_.size() && k_blank.find(s_[i_]) != std::string_view::npos) ++i_;
  }
  bool eat(char c) {
    blank();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool at_end() {
    blank();
    return i_ >= s_.size();
  }
  std::optional<std::string> ident() {
    blank();
    const size_t b = i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_' ||
                              s_[i_] == '.' || s_[i_] == '-'))
      ++i_;
    if (i_ == b || std::isdigit(static_cast<unsigned char>(s_[b]))) return std::nullopt;
    return std::string(s_.substr(b, i_ - b));
  }
  std::optional<value> literal(int depth = 0) {
    if (depth > 64) return std::nullopt;
    blank();
    if (i_ >= s_.size()) return std::nullopt;
    const char c = s_[i_];
    if (c == '"' || c == '\'') return string_lit();
    if (c == '[' || c == '(') {
      const char close = c == '[' ? ']' : ')';
      ++i_;
      json::array arr;
      if (eat(close)) return value(std::move(arr));
      for (;;) {
        auto v = literal(depth + 1);
        if (!v) return std::nullopt;
        arr.push_back(std::move(*v));
        if (eat(close)) break;
        if (!eat(',')) return std::nullopt;
        if (eat(close)) break;  // trailing comma
      }
      return value(std::move(arr));
    }
    if (c == '{') {
      ++i_;
      value obj = json::object{};
      if (eat('}')) return obj;
      for (;;) {
        auto k = literal(depth + 1);
        if (!k || !eat(':')) return std::nullopt;
        auto v = literal(depth + 1);
        if (!v) return std::nullopt;
        std::string key;
        if (k->is_string())
          key = k->as_string();
        else
          key = json::dump(*k);
        obj[key] = std::move(*v);
        if (eat('}')) break;
        if (!eat(',')) return std::nullopt;
        if (eat('}')) break;
      }
      return obj;
    }
    const size_t b = i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.' ||
                              s_[i_] == '-' || s_[i_] == '+' || s_[i_] == '_'))
      ++i_;
    const std::string_view word = s_.substr(b, i_ - b);
    if (word == "True") return value(true);
    if (word == "False") return value(false);
    if (word == "None") return value();
    if (word.empty()) return std::nullopt;
    auto num = json::parse(word);  // Python and JSON numbers agree on the forms models write
    if (!num || !num->is_number()) return std::nullopt;
    return std::move(*num);
  }

 private:
  std::optional<value> string_lit() {
    const char q = s_[i_++];
    std::string out;
    while (i_ < s_.size() && s_[i_] != q) {
      char ch = s_[i_++];
      if (ch != '\\') {
        out.push_back(ch);
        continue;
      }
      if (i_ >= s_.size()) return std::nullopt;
      ch = s_[i_++];
      switch (ch) {
        case 'n':
          out.push_back('\n');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case '\\':
        case '\'':
        case '"':
          out.push_back(ch);
          break;
        case 'u': {
          if (i_ + 4 > s_.size()) return std::nullopt;
          auto u = json::parse("\"\\u" + std::string(s_.substr(i_, 4)) + "\"");
          if (!u) return std::nullopt;
          out += u->as_string();
          i_ += 4;
          break;
        }
        default:
          out.push_back('\\');
          out.push_back(ch);
      }
    }
    if (i_ >= s_.size()) return std::nullopt;
    ++i_;
    return value(std::move(out));
  }
  std::string_view s_;
  size_t i_ = 0;
};

parsed_tool_output parse_pythonic(std::string_view text) {
  const std::string_view s = trim(text);
  if (s.size() < 2 || s.front() != '[' || s.back() != ']') return as_content(text);
  py_reader r(s.substr(1, s.size() - 2));
  parsed_tool_output out;
  if (r.at_end()) return as_content(text);
  for (;;) {
    auto name = r.ident();
    if (!name || !r.eat('(')) return as_content(text);
    value args = json::object{};
    if (!r.eat(')')) {
      for (;;) {
        auto key = r.ident();
        if (!key || !r.eat('=')) return as_content(text);
        auto v = r.literal();
        if (!v) return as_content(text);
        args[*key] = std::move(*v);
        if (r.eat(')')) break;
        if (!r.eat(',')) return as_content(text);
        if (r.eat(')')) break;
      }
    }
    out.calls.push_back({new_tool_call_id(), std::move(*name), dump_args(args)});
    if (r.at_end()) break;
    if (!r.eat(',')) return as_content(text);
  }
  return out;
}

const tool_parser k_parsers[] = {
    {"hermes", {"<tool_call>"}, false, parse_hermes},
    {"llama3_json", {"<|python_tag|>", "{"}, true, parse_llama3_json},
    {"mistral", {"[TOOL_CALLS]"}, false, parse_mistral},
    {"pythonic", {"["}, true, parse_pythonic},
};

}  // namespace

const tool_parser* find_tool_parser(std::string_view name) {
  for (const auto& p : k_parsers)
    if (name == p.name) return &p;
  return nullptr;
}

std::string tool_parser_names() {
  std::string out;
  for (const auto& p : k_parsers) {
    if (!out.empty()) out += ", ";
    out += p.name;
  }
  return out;
}

std::string new_tool_call_id() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  uint64_t a, b;
  {
    std::lock_guard lk(mu);
    a = rng();
    b = rng();
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "chatcmpl-tool-%016llx%016llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return buf;
}

std::string required_tool_calls_schema(const json::value& tools, bool parallel) {
  value any = json::array{};
  if (tools.is_array())
    for (const auto& t : tools.as_array()) {
      const value* f = t.find("function");
      if (!f || !f->is_object()) continue;
      const value* name = f->find("name");
      if (!name || !name->is_string()) continue;
      value params = json::object{};
      if (const value* p = f->find("parameters"); p && (p->is_object() || p->is_bool()))
        params = *p;
      value item = json::object{};
      item["type"] = value("object");
      value props = json::object{};
      value name_schema = json::object{};
      name_schema["type"] = value("string");
      name_schema["enum"] = json::array{value(name->as_string())};
      props["name"] = std::move(name_schema);
      props["parameters"] = std::move(params);
      item["properties"] = std::move(props);
      item["required"] = json::array{value("name"), value("parameters")};
      any.push_back(std::move(item));
    }
  value schema = json::object{};
  schema["type"] = value("array");
  schema["minItems"] = value(int64_t{1});
  if (!parallel) schema["maxItems"] = value(int64_t{1});
  value items = json::object{};
  items["type"] = value("object");
  items["anyOf"] = std::move(any);
  schema["items"] = std::move(items);
  return json::dump(schema);
}

parsed_tool_output parse_required_tool_calls(std::string_view text) {
  auto v = json::parse(trim(text));
  if (!v || !v->is_array() || v->as_array().empty()) return as_content(text);
  parsed_tool_output out;
  for (const auto& item : v->as_array()) {
    auto c = call_from_object(item);
    if (!c) return as_content(text);
    out.calls.push_back(std::move(*c));
  }
  return out;
}

parsed_tool_output parse_tool_output(tool_mode mode, const tool_parser* parser,
                                     std::string_view tool_name, std::string_view text) {
  switch (mode) {
    case tool_mode::none:
      return as_content(text);
    case tool_mode::automatic:
      return parser ? parser->parse(text) : as_content(text);
    case tool_mode::required:
      return parse_required_tool_calls(text);
    case tool_mode::named:
      return {{}, {tool_call{new_tool_call_id(), std::string(tool_name), std::string(text)}}};
  }
  return as_content(text);
}

tool_stream::tool_stream(tool_mode mode, const tool_parser* parser, std::string tool_name)
    : mode_(mode), parser_(parser), name_(std::move(tool_name)) {
  if (mode_ == tool_mode::automatic && !parser_) mode_ = tool_mode::none;
  if (mode_ == tool_mode::named) named_id_ = new_tool_call_id();
}

std::string tool_stream::push(std::string_view piece) {
  text_ += piece;
  if (mode_ == tool_mode::none) {
    sent_ = text_.size();
    return std::string(piece);
  }
  if (mode_ != tool_mode::automatic || in_call_) return {};
  if (parser_->at_start_only && !plain_) {
    const size_t f = text_.find_first_not_of(k_blank);
    if (f == std::string::npos) return {};  // only blanks so far: they may precede a call
    for (std::string_view m : parser_->markers) {
      const size_t have = std::min(m.size(), text_.size() - f);
      if (std::string_view(text_).substr(f, have) == m.substr(0, have)) {
        if (have == m.size()) in_call_ = true;
        return {};  // a call, or maybe one: held
      }
    }
    plain_ = true;  // plain text: everything streams from here on
  }
  if (plain_) {
    std::string out = text_.substr(sent_);
    sent_ = text_.size();
    return out;
  }
  size_t first = std::string::npos;
  for (std::string_view m : parser_->markers) first = std::min(first, text_.find(m, sent_));
  if (first != std::string::npos) {
    std::string out = text_.substr(sent_, first - sent_);
    sent_ = first;
    in_call_ = true;
    return out;
  }
  // Hold back a tail that may be the start of a marker.
  size_t hold = 0;
  for (std::string_view m : parser_->markers)
    for (size_t k = std::min(m.size() - 1, text_.size() - sent_); k > hold; --k)
      if (std::string_view(text_).substr(text_.size() - k) == m.substr(0, k)) {
        hold = k;
        break;
      }
  std::string out = text_.substr(sent_, text_.size() - sent_ - hold);
  sent_ += out.size();
  return out;
}

tool_stream::final_part tool_stream::finish() {
  final_part out;
  switch (mode_) {
    case tool_mode::none:
      return out;
    case tool_mode::named:
      out.calls.push_back({named_id_, name_, text_});
      return out;
    case tool_mode::required:
    case tool_mode::automatic: {
      parsed_tool_output p = parse_tool_output(mode_, parser_, name_, text_);
      if (p.calls.empty()) {
        out.content = text_.substr(sent_);
        return out;
      }
      if (p.content.size() > sent_) out.content = p.content.substr(sent_);
      out.calls = std::move(p.calls);
      return out;
    }
  }
  return out;
}

}  // namespace coserve::http
