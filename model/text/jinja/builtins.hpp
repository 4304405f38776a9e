// Built-in filters, tests, globals and Python methods of the chat-template interpreter, with the
// semantics of jinja2 3.1 under ImmutableSandboxedEnvironment (methods that mutate lists or dicts
// are refused as unsafe, as there).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "model/text/jinja/jvalue.hpp"

namespace coserve::jinja {

// Applies filter `name` to `subject`. Errors raise template_error.
jvalue apply_filter(std::string_view name, const jvalue& subject, const call_args& args);
// Evaluates test `name` (`x is name(args)`).
bool apply_test(std::string_view name, const jvalue& subject, const call_args& args);
bool is_known_test(std::string_view name);
// `obj.name`: dict key (or a dict/str/list method), namespace attribute; undefined when missing.
jvalue get_attr(const jvalue& obj, std::string_view name);
// `obj[key]`: key first, then attribute, as jinja2's getitem.
jvalue get_item(const jvalue& obj, const jvalue& key);
// Python iteration: list items, dict keys, string characters (UTF-8 code points).
std::vector<jvalue> iterate(const jvalue& v);
// Python `in`.
bool contains(const jvalue& container, const jvalue& item);
// tojson as Hugging Face defines it (json.dumps with ensure_ascii=False by default).
std::string to_json_text(const jvalue& v, const call_args& args);

}  // namespace coserve::jinja

namespace coserve::jinja {
// Widths, indents and precisions above this are refused (template_error) instead of allocating
// that much: Python would build the string, no real template asks for it.
inline constexpr int64_t k_max_width = int64_t{1} << 20;

// A pad/indent/precision argument as a count; negative counts as 0 (Python's ' ' * -n == '').
inline size_t width_arg(int64_t w, const char* what) {
  if (w > k_max_width)
    throw template_error(std::string(what) + " " + std::to_string(w) + " is too large");
  return w < 0 ? 0 : static_cast<size_t>(w);
}

// Appends printf(f, value) whatever its length.
template <class T>
void append_printf(std::string& out, const std::string& f, T value) {
  int n = std::snprintf(nullptr, 0, f.c_str(), value);
  if (n < 0) throw template_error("bad format " + f);
  const size_t old = out.size();
  out.resize(old + static_cast<size_t>(n) + 1);
  std::snprintf(out.data() + old, static_cast<size_t>(n) + 1, f.c_str(), value);
  out.resize(old + static_cast<size_t>(n));
}

// Appends code point cp as UTF-8.
void append_cp(std::string& out, int32_t cp);

// Python's `fmt % args`: %(key) from a mapping, flags, width and precision (or *), and the
// conversions s r a c d i u o x X e E f F g G % (py_format.cpp).
std::string percent_format(const std::string& fmt, const jvalue& args);
// Python's str.format(): fields by position, number or keyword with .attr / [key], !r !s !a, and
// the format-spec mini-language (fill, align, sign, z, #, 0, width, grouping, precision, type).
std::string str_format(const std::string& fmt, const call_args& args, int depth = 0);
// UTF-8 code points of s, each as its own string (Python indexes strings by code point).
std::vector<std::string> code_points(std::string_view s);
// The byte offset where each code point of `s` starts (code_points' boundaries), then s.size().
std::vector<std::size_t> code_point_offsets(std::string_view s);
// code_points(s).size() without building them.
std::size_t code_point_count(std::string_view s);
// Python's str.strip() / lstrip() / rstrip() (Unicode whitespace as Python defines it).
std::string python_strip(std::string_view s, bool left = true, bool right = true);
// HTML escaping as markupsafe.escape does (& < > " ').
std::string html_escape(const std::string& s);
}  // namespace coserve::jinja
