// JSON value: accessors, simdjson-based parsing and Python-compatible serialisation.
#include "model/text/json/value.hpp"

#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <cmath>

namespace coserve::json {

int64_t value::as_int() const {
  if (is_double()) return static_cast<int64_t>(std::get<double>(v_));
  if (is_bool()) return std::get<bool>(v_) ? 1 : 0;
  return std::get<int64_t>(v_);
}

double value::as_double() const {
  if (is_int()) return static_cast<double>(std::get<int64_t>(v_));
  if (is_bool()) return std::get<bool>(v_) ? 1.0 : 0.0;
  return std::get<double>(v_);
}

const value* value::find(std::string_view key) const {
  if (!is_object()) return nullptr;
  for (const auto& [k, v] : as_object())
    if (k == key) return &v;
  return nullptr;
}

value* value::find(std::string_view key) {
  return const_cast<value*>(static_cast<const value*>(this)->find(key));
}

value& value::operator[](std::string_view key) {
  if (is_null()) v_ = object{};
  if (value* v = find(key)) return *v;
  auto& o = as_object();
  o.emplace_back(std::string(key), value{});
  return o.back().second;
}

void value::push_back(value v) {
  if (is_null()) v_ = array{};
  as_array().push_back(std::move(v));
}

size_t value::size() const {
  if (is_array()) return as_array().size();
  if (is_object()) return as_object().size();
  if (is_string()) return as_string().size();
  return 0;
}

bool value::operator==(const value& other) const {
  if (is_number() && other.is_number()) {
    if (is_int() && other.is_int()) return as_int() == other.as_int();
    return as_double() == other.as_double();
  }
  if (v_.index() != other.v_.index()) return false;
  return v_ == other.v_;
}

namespace {

result<value> convert_element(simdjson::dom::element e) {
  using simdjson::dom::element_type;
  switch (e.type()) {
    case element_type::NULL_VALUE:
      return value{};
    case element_type::BOOL:
      return value{bool(e.get_bool().value())};
    case element_type::INT64:
      return value{e.get_int64().value()};
    case element_type::UINT64: {
      uint64_t u = e.get_uint64().value();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return value{static_cast<int64_t>(u)};
      return value{static_cast<double>(u)};
    }
    case element_type::DOUBLE:
      return value{e.get_double().value()};
    case element_type::STRING:
      return value{std::string_view(e.get_string().value())};
    case element_type::ARRAY: {
      array a;
      simdjson::dom::array arr = e.get_array().value();
      for (simdjson::dom::element x : arr) {
        auto v = convert_element(x);
        if (!v) return v;
        a.push_back(std::move(*v));
      }
      return value{std::move(a)};
    }
    case element_type::OBJECT: {
      value o = object{};
      simdjson::dom::object obj = e.get_object().value();
      for (auto field : obj) {
        auto v = convert_element(field.value);
        if (!v) return v;
        o[field.key] = std::move(*v);  // duplicate keys: the last wins
      }
      return o;
    }
  }
  return make_error("json_parse", "unknown element type");
}

}  // namespace

// simdjson rejects integers beyond 64 bits (NUMBER_ERROR); Python reads them and we keep them as
// doubles, so such literals (outside strings) get a ".0" appended before a second parse.
static std::string widen_big_ints(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 16);
  bool in_str = false;
  for (size_t i = 0; i < text.size();) {
    char c = text[i];
    if (in_str) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) {
        out += text[i + 1];
        i += 2;
        continue;
      }
      if (c == '"') in_str = false;
      ++i;
      continue;
    }
    if (c == '"') {
      in_str = true;
      out += c;
      ++i;
      continue;
    }
    if (c >= '0' && c <= '9') {
      size_t j = i;
      while (j < text.size() && text[j] >= '0' && text[j] <= '9') ++j;
      out.append(text.substr(i, j - i));
      bool frac = j < text.size() && (text[j] == '.' || text[j] == 'e' || text[j] == 'E');
      if (!frac && j - i > 18) out += ".0";
      i = j;
      continue;
    }
    out += c;
    ++i;
  }
  return out;
}

result<value> parse(std::string_view text) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(text);
  simdjson::dom::element root;
  auto err = parser.parse(padded).get(root);
  if (err == simdjson::NUMBER_ERROR) {
    padded = simdjson::padded_string(widen_big_ints(text));
    err = parser.parse(padded).get(root);
  }
  if (err) {
    return make_error("json_parse", std::string("invalid JSON: ") + simdjson::error_message(err));
  }
  return convert_element(root);
}

void append_python_float(std::string& out, double d) {
  if (std::isnan(d)) {
    out += "nan";
    return;
  }
  if (std::isinf(d)) {
    out += d < 0 ? "-inf" : "inf";
    return;
  }
  // Shortest round-trip digits in scientific form, then laid out as Python's repr does: fixed
  // notation when the decimal exponent is in [-4, 16), scientific otherwise.
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string_view s(buf, static_cast<size_t>(r.ptr - buf));
  bool neg = false;
  if (!s.empty() && s[0] == '-') {
    neg = true;
    s.remove_prefix(1);
  }
  size_t epos = s.find('e');
  std::string digits;
  for (char c : s.substr(0, epos))
    if (c != '.') digits += c;
  int exp = 0;
  std::from_chars(s.data() + epos + 1 + (s[epos + 1] == '+' ? 1 : 0), s.data() + s.size(), exp);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  if (neg) out += '-';
  if (exp >= 16 || exp < -4) {
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1);
    }
    out += 'e';
    out += exp < 0 ? '-' : '+';
    int ae = exp < 0 ? -exp : exp;
    if (ae < 10) out += '0';
    out += std::to_string(ae);
  } else if (exp < 0) {
    out += "0.";
    out.append(static_cast<size_t>(-exp - 1), '0');
    out += digits;
  } else {
    size_t int_len = static_cast<size_t>(exp) + 1;
    if (digits.size() <= int_len) {
      out += digits;
      out.append(int_len - digits.size(), '0');
      out += ".0";
    } else {
      out.append(digits, 0, int_len);
      out += '.';
      out.append(digits, int_len);
    }
  }
}

void append_escaped(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += ch;
        }
    }
  }
}

namespace {

void append_u16(std::string& out, unsigned u) {
  static constexpr char hex[] = "0123456789abcdef";
  out += "\\u";
  for (int sh = 12; sh >= 0; sh -= 4) out += hex[(u >> sh) & 15];
}

// ensure_ascii: non-ASCII code points as \uXXXX (surrogate pairs above the BMP), as Python does.
void append_escaped_ascii(std::string& out, std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      append_escaped(out, s.substr(i, 1));
      ++i;
      continue;
    }
    unsigned cp = 0;
    size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    cp = len == 4 ? (c & 0x07u) : len == 3 ? (c & 0x0Fu) : len == 2 ? (c & 0x1Fu) : c;
    for (size_t k = 1; k < len && i + k < s.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3Fu);
    i += len;
    if (cp >= 0x10000) {
      cp -= 0x10000;
      append_u16(out, 0xD800 + (cp >> 10));
      append_u16(out, 0xDC00 + (cp & 0x3FF));
    } else {
      append_u16(out, cp);
    }
  }
}

void append_string(std::string& out, std::string_view s, bool ascii) {
  out += '"';
  if (ascii)
    append_escaped_ascii(out, s);
  else
    append_escaped(out, s);
  out += '"';
}

void newline(std::string& out, const dump_options& o, int depth) {
  out += '\n';
  out.append(static_cast<size_t>(o.indent) * static_cast<size_t>(depth), ' ');
}

void dump_into(std::string& out, const value& v, const dump_options& o, int depth) {
  // With an indent, Python's item separator drops its trailing space at line ends: ", " -> ",".
  std::string_view item_sep = o.item_sep;
  if (o.indent >= 0 && item_sep == ", ") item_sep = ",";
  switch (v.type()) {
    case value::kind::null:
      out += "null";
      return;
    case value::kind::boolean:
      out += v.as_bool() ? "true" : "false";
      return;
    case value::kind::integer:
      out += std::to_string(v.as_int());
      return;
    case value::kind::floating: {
      double d = v.as_double();
      if (std::isnan(d))
        out += "NaN";
      else if (std::isinf(d))
        out += d < 0 ? "-Infinity" : "Infinity";
      else
        append_python_float(out, d);
      return;
    }
    case value::kind::string:
      append_string(out, v.as_string(), o.ensure_ascii);
      return;
    case value::kind::array: {
      const auto& a = v.as_array();
      if (a.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < a.size(); ++i) {
        if (i) out += item_sep;
        if (o.indent >= 0) newline(out, o, depth + 1);
        dump_into(out, a[i], o, depth + 1);
      }
      if (o.indent >= 0) newline(out, o, depth);
      out += ']';
      return;
    }
    case value::kind::object: {
      const auto& obj = v.as_object();
      if (obj.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, value>*> members;
      members.reserve(obj.size());
      for (const auto& m : obj) members.push_back(&m);
      if (o.sort_keys)
        std::stable_sort(members.begin(), members.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (size_t i = 0; i < members.size(); ++i) {
        if (i) out += item_sep;
        if (o.indent >= 0) newline(out, o, depth + 1);
        append_string(out, members[i]->first, o.ensure_ascii);
        out += o.key_sep;
        dump_into(out, members[i]->second, o, depth + 1);
      }
      if (o.indent >= 0) newline(out, o, depth);
      out += '}';
      return;
    }
  }
}

}  // namespace

std::string dump(const value& v, const dump_options& opts) {
  std::string out;
  dump_into(out, v, opts, 0);
  return out;
}

void dump_compact(const value& v, std::string& out) {
  dump_options o;
  o.item_sep = ",";
  o.key_sep = ":";
  dump_into(out, v, o, 0);
}

}  // namespace coserve::json
