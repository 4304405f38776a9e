// The run-time value of the chat-template interpreter: Python's object model as far as chat
// templates use it. Lists and dicts are shared by reference (as in Python: `set a = b` aliases);
// strings, numbers, none and undefined are plain values. Values live inside one render call on one
// thread; nothing here is shared across threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "model/text/json/value.hpp"

namespace coserve::jinja {

// 128-bit integers for overflow-checked 64-bit arithmetic (GCC and Clang; __extension__ keeps
// -Wpedantic quiet).
__extension__ typedef __int128 wide_int;

struct jvalue;
struct call_args;

// Raised inside the interpreter and turned into a coserve::error at the public API; an exception
// keeps the recursive evaluator free of result plumbing on every node. It never crosses the API.
struct template_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct jlist {
  std::vector<jvalue> items;
  bool tuple = false;  // prints as (a, b); behaves as a list otherwise
  // A generator, as jinja2's map/select/reject/... return: iterable once consumed by a filter or
  // loop, always true, but without len(), indexing or JSON form.
  bool lazy = false;
  bool group = false;  // groupby's (grouper, list) tuple: also reads as .grouper and .list
};

// Dict keys are stored as strings; a non-string key (int, bool, None, float) is encoded by
// dict_key() with a leading \x02 byte and decoded by key_value(), so {0: 1} keeps int keys.
struct jdict {
  std::vector<std::pair<std::string, jvalue>> items;  // insertion order
  bool is_namespace = false;                          // namespace(): attribute assignment allowed
  jvalue* find(std::string_view key);
  const jvalue* find(std::string_view key) const;
  jvalue& set(std::string_view key, jvalue v);
};

struct jfunc {
  std::string name;
  std::function<jvalue(call_args&)> fn;
};

// Every list, dict and function is made through these. While a render_arena is active on the
// thread, each one is also recorded so the arena can empty it at the end of the render: a template
// can build reference cycles (`ns.a = ns`, a dict holding its own bound method, a macro held by the
// frame it captures) that shared ownership alone would never free.
std::shared_ptr<jlist> new_list();
std::shared_ptr<jdict> new_dict();
std::shared_ptr<jfunc> new_func();

// One render's containers (see new_list). Nothing made during a render may be used after it.
class render_arena {
 public:
  render_arena();
  ~render_arena();  // empties every list and dict and drops every function made meanwhile
  render_arena(const render_arena&) = delete;
  render_arena& operator=(const render_arena&) = delete;

  struct registry;

 private:
  std::unique_ptr<registry> reg_;
  registry* prev_;
};

struct undefined_v {
  std::string hint;  // the message an operation on it raises, e.g. "'foo' is undefined"
};

struct jvalue {
  std::variant<undefined_v, std::monostate, bool, int64_t, double, std::string,
               std::shared_ptr<jlist>, std::shared_ptr<jdict>, std::shared_ptr<jfunc>>
      v;
  // A string marked safe (jinja2's Markup, from the `safe` filter): `markup + str` HTML-escapes
  // the plain operand, as Markup.__add__ does. Every other operation yields a plain value.
  bool markup = false;

  jvalue() : v(std::monostate{}) {}
  jvalue(std::monostate) : v(std::monostate{}) {}
  jvalue(undefined_v u) : v(std::move(u)) {}
  jvalue(bool b) : v(b) {}
  jvalue(int64_t i) : v(i) {}
  jvalue(int i) : v(static_cast<int64_t>(i)) {}
  jvalue(size_t i) : v(static_cast<int64_t>(i)) {}
  jvalue(double d) : v(d) {}
  jvalue(std::string s) : v(std::move(s)) {}
  jvalue(const char* s) : v(std::string(s)) {}
  jvalue(std::shared_ptr<jlist> l) : v(std::move(l)) {}
  jvalue(std::shared_ptr<jdict> d) : v(std::move(d)) {}
  jvalue(std::shared_ptr<jfunc> f) : v(std::move(f)) {}

  static jvalue undefined(std::string hint) { return jvalue(undefined_v{std::move(hint)}); }
  static jvalue list(std::vector<jvalue> items = {}, bool tuple = false);
  static jvalue dict();

  bool is_undefined() const { return v.index() == 0; }
  bool is_none() const { return v.index() == 1; }
  bool is_bool() const { return v.index() == 2; }
  bool is_int() const { return v.index() == 3; }
  bool is_float() const { return v.index() == 4; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return v.index() == 5; }
  bool is_list() const { return v.index() == 6; }
  bool is_dict() const { return v.index() == 7; }
  bool is_func() const { return v.index() == 8; }

  bool as_bool() const { return std::get<bool>(v); }
  int64_t as_int() const;  // bool/int/float
  double as_float() const;
  const std::string& str() const { return std::get<std::string>(v); }
  jlist& lst() const { return *std::get<6>(v); }
  jdict& dct() const { return *std::get<7>(v); }
  jfunc& fn() const { return *std::get<8>(v); }
  const std::string& undefined_hint() const { return std::get<0>(v).hint; }

  bool truthy() const;            // Python truthiness; undefined is false
  std::string to_str() const;     // Python str(); undefined prints ""
  std::string repr() const;       // Python repr()
  std::string type_name() const;  // 'dict object', 'list object', ... as jinja2 names them
};

struct call_args {
  std::vector<jvalue> pos;
  std::vector<std::pair<std::string, jvalue>> kw;
  // Positional i, else keyword `name`, else `def`.
  jvalue get(size_t i, std::string_view name, jvalue def = jvalue::undefined("")) const;
  bool has(size_t i, std::string_view name) const;
};

std::string dict_key(const jvalue& k);
jvalue key_value(const std::string& stored);

bool equals(const jvalue& a, const jvalue& b);
// Python ordering for numbers and strings (lists element-wise); error otherwise.
int compare(const jvalue& a, const jvalue& b);
std::string python_repr_string(std::string_view s);

jvalue from_json(const json::value& v);
// Undefined and functions cannot be serialised: template_error.
json::value to_json(const jvalue& v);

}  // namespace coserve::jinja
