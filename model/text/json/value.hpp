// coserve::json::value: a small JSON document model shared by the HTTP layer, the engine facade and
// the chat-template interpreter. Objects keep insertion order (templates and tojson print keys in
// the order the request gave them). Values are plain data: copyable, no sharing, not thread-safe to
// mutate concurrently (like any std container).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "base/result.hpp"

namespace coserve::json {

class value;
using array = std::vector<value>;
using object = std::vector<std::pair<std::string, value>>;

class value {
 public:
  enum class kind { null, boolean, integer, floating, string, array, object };

  value() noexcept = default;
  value(std::nullptr_t) noexcept {}  // NOLINT(implicit)
  value(bool b) : v_(b) {}           // NOLINT(implicit)
  // Every integral type except bool and char converts to int64 (uint64 beyond int64 wraps: callers
  // that may hold such values pass a double).
  template <class I>
  requires(std::is_integral_v<I> && !std::is_same_v<I, bool> && !std::is_same_v<I, char>) value(I i)
      : v_(static_cast<int64_t>(i)) {}               // NOLINT(implicit)
  value(double d) : v_(d) {}                         // NOLINT(implicit)
  value(float f) : v_(static_cast<double>(f)) {}     // NOLINT(implicit)
  value(std::string s) : v_(std::move(s)) {}         // NOLINT(implicit)
  value(const char* s) : v_(std::string(s)) {}       // NOLINT(implicit)
  value(std::string_view s) : v_(std::string(s)) {}  // NOLINT(implicit)
  value(array a) : v_(std::move(a)) {}               // NOLINT(implicit)
  value(object o) : v_(std::move(o)) {}              // NOLINT(implicit)

  kind type() const noexcept { return static_cast<kind>(v_.index()); }
  bool is_null() const noexcept { return v_.index() == 0; }
  bool is_bool() const noexcept { return v_.index() == 1; }
  bool is_int() const noexcept { return v_.index() == 2; }
  bool is_double() const noexcept { return v_.index() == 3; }
  bool is_number() const noexcept { return is_int() || is_double(); }
  bool is_string() const noexcept { return v_.index() == 4; }
  bool is_array() const noexcept { return v_.index() == 5; }
  bool is_object() const noexcept { return v_.index() == 6; }

  // Accessors require the matching kind (checked by assert through std::get in debug builds: a
  // wrong kind throws std::bad_variant_access, a programming error).
  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const;    // int, or a double truncated
  double as_double() const;  // double, or an int converted
  const std::string& as_string() const { return std::get<std::string>(v_); }
  std::string& as_string() { return std::get<std::string>(v_); }
  const array& as_array() const { return std::get<array>(v_); }
  array& as_array() { return std::get<array>(v_); }
  const object& as_object() const { return std::get<object>(v_); }
  object& as_object() { return std::get<object>(v_); }

  // nullptr when this is not an object or the key is missing.
  const value* find(std::string_view key) const;
  value* find(std::string_view key);
  // Object insert-or-get; a null value becomes an empty object first.
  value& operator[](std::string_view key);
  // Array append; a null value becomes an empty array first.
  void push_back(value v);
  // Elements of an array, members of an object, bytes of a string; 0 otherwise.
  size_t size() const;

  // Deep equality; an int and a double compare by numeric value (1 == 1.0, as Python does).
  bool operator==(const value& other) const;

 private:
  std::variant<std::monostate, bool, int64_t, double, std::string, array, object> v_;
};

// Parses one JSON document (simdjson). Invalid JSON or invalid UTF-8: error code "json_parse" with
// the reason. Duplicate keys keep the last value (as Python's json does). Integers beyond int64
// become doubles.
result<value> parse(std::string_view text);

struct dump_options {
  int indent = -1;  // < 0: single line; >= 0: newline + indent spaces per level (Python's indent)
  bool ensure_ascii = false;
  std::string_view item_sep = ", ";
  std::string_view key_sep = ": ";
  bool sort_keys = false;
};

// Serialises like Python's json.dumps with the matching options (the defaults match
// json.dumps(x, ensure_ascii=False)). Doubles print as Python's repr: shortest round trip.
std::string dump(const value& v, const dump_options& opts = {});
// Appends {"a":1,"b":[1,2]} (no spaces) for HTTP bodies.
void dump_compact(const value& v, std::string& out);
// Appends the JSON escaping of s without quotes (", \, control characters; UTF-8 kept).
void append_escaped(std::string& out, std::string_view s);
// Appends a double the way Python's repr prints a float (1.0, 0.1, 1e-05, 1e+20, inf, nan).
void append_python_float(std::string& out, double d);

}  // namespace coserve::json
