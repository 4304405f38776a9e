// Python object semantics for template values: truthiness, str/repr, equality, ordering, JSON.
#include "model/text/jinja/jvalue.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>

namespace coserve::jinja {

jvalue* jdict::find(std::string_view key) {
  for (auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

const jvalue* jdict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

jvalue& jdict::set(std::string_view key, jvalue v) {
  if (jvalue* p = find(key)) {
    *p = std::move(v);
    return *p;
  }
  items.emplace_back(std::string(key), std::move(v));
  return items.back().second;
}

std::string dict_key(const jvalue& k) {
  if (k.is_string()) return k.str();
  if (k.is_none()) return "\x02N";
  std::string tagged(1, '\x02');
  if (k.is_float() && k.as_float() != std::floor(k.as_float()))
    return tagged.append("F").append(k.to_str());
  if (k.is_number()) return tagged.append("I").append(std::to_string(k.as_int()));
  throw template_error("unhashable type: '" + k.type_name() + "'");
}

jvalue key_value(const std::string& s) {
  if (s.empty() || s[0] != '\x02') return jvalue(s);
  if (s[1] == 'N') return jvalue();
  if (s[1] == 'F') return jvalue(std::stod(s.substr(2)));
  return jvalue(static_cast<int64_t>(std::stoll(s.substr(2))));
}

struct render_arena::registry {
  std::vector<std::weak_ptr<jlist>> lists;
  std::vector<std::weak_ptr<jdict>> dicts;
  std::vector<std::weak_ptr<jfunc>> funcs;
  size_t compact_at = 1024;

  // Drops the entries of containers already freed (their weak references would keep the memory),
  // amortized: when the total doubles.
  void maybe_compact() {
    const size_t n = lists.size() + dicts.size() + funcs.size();
    if (n < compact_at) return;
    auto sweep = [](auto& v) { std::erase_if(v, [](const auto& w) { return w.expired(); }); };
    sweep(lists);
    sweep(dicts);
    sweep(funcs);
    compact_at = std::max<size_t>(1024, 2 * (lists.size() + dicts.size() + funcs.size()));
  }
};

namespace {
thread_local render_arena::registry* active_arena = nullptr;
}  // namespace

render_arena::render_arena() : reg_(std::make_unique<registry>()), prev_(active_arena) {
  active_arena = reg_.get();
}

render_arena::~render_arena() {
  active_arena = prev_;  // what emptying frees is not recorded again
  for (auto& w : reg_->funcs)
    if (auto f = w.lock()) f->fn = nullptr;
  for (auto& w : reg_->dicts)
    if (auto d = w.lock()) {
      auto items = std::move(d->items);
      d->items.clear();
    }
  for (auto& w : reg_->lists)
    if (auto l = w.lock()) {
      auto items = std::move(l->items);
      l->items.clear();
    }
}

namespace {
template <class T>
std::shared_ptr<T> make_recorded(std::vector<std::weak_ptr<T>> render_arena::registry::*where) {
  auto p = std::make_shared<T>();
  if (active_arena) {
    (active_arena->*where).push_back(p);
    active_arena->maybe_compact();
  }
  return p;
}
}  // namespace

std::shared_ptr<jlist> new_list() { return make_recorded(&render_arena::registry::lists); }
std::shared_ptr<jdict> new_dict() { return make_recorded(&render_arena::registry::dicts); }
std::shared_ptr<jfunc> new_func() { return make_recorded(&render_arena::registry::funcs); }

jvalue jvalue::list(std::vector<jvalue> items, bool tuple) {
  auto l = new_list();
  l->items = std::move(items);
  l->tuple = tuple;
  return jvalue(std::move(l));
}

jvalue jvalue::dict() { return jvalue(new_dict()); }

int64_t jvalue::as_int() const {
  if (is_bool()) return as_bool() ? 1 : 0;
  if (is_float()) {
    // int(x) in Python; a float outside int64 (or nan/inf) has no int64 value.
    double d = std::get<double>(v);
    if (!(d >= -0x1p63 && d < 0x1p63))
      throw template_error("cannot convert float " + to_str() + " to a 64-bit integer");
    return static_cast<int64_t>(d);
  }
  return std::get<int64_t>(v);
}

double jvalue::as_float() const {
  if (is_float()) return std::get<double>(v);
  return static_cast<double>(as_int());
}

bool jvalue::truthy() const {
  switch (v.index()) {
    case 0:
    case 1:
      return false;
    case 2:
      return as_bool();
    case 3:
      return as_int() != 0;
    case 4:
      return as_float() != 0.0;
    case 5:
      return !str().empty();
    case 6:
      return lst().lazy || !lst().items.empty();
    case 7:
      return dct().is_namespace || !dct().items.empty();
    default:
      return true;
  }
}

namespace {

// Python's str.isprintable() per code point: false for categories Cc, Cf, Cs, Co, Cn, Zl, Zp and
// Zs, except the ASCII space. repr() escapes the code points it rejects.
bool py_is_printable(int32_t cp) {
  if (cp == 0x20) return true;
  switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

}  // namespace

// Python's repr(str): quotes chosen as Python chooses them, \n \r \t and backslash escaped, other
// non-printable code points as \xhh, \uhhhh or \Uhhhhhhhh. Bytes that are not valid UTF-8 (not
// produced from JSON input) are copied as they are.
std::string python_repr_string(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  static constexpr char hex[] = "0123456789abcdef";
  auto escape = [&](char kind, uint32_t cp, int digits) {
    out += '\\';
    out += kind;
    for (int i = digits - 1; i >= 0; --i) out += hex[(cp >> (4 * i)) & 15];
  };
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (s[i] == q || s[i] == '\\') {
        out += '\\';
        out += s[i];
      } else if (s[i] == '\n')
        out += "\\n";
      else if (s[i] == '\r')
        out += "\\r";
      else if (s[i] == '\t')
        out += "\\t";
      else if (c < 0x20 || c == 0x7f)
        escape('x', c, 2);
      else
        out += s[i];
      ++i;
      continue;
    }
    utf8proc_int32_t cp = -1;
    const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                    utf8proc_ssize_t(s.size() - i), &cp);
    if (n <= 0) {
      out += s[i++];
      continue;
    }
    if (py_is_printable(cp))
      out.append(s.data() + i, size_t(n));
    else if (cp < 0x100)
      escape('x', uint32_t(cp), 2);
    else if (cp < 0x10000)
      escape('u', uint32_t(cp), 4);
    else
      escape('U', uint32_t(cp), 8);
    i += size_t(n);
  }
  out += q;
  return out;
}

std::string jvalue::to_str() const {
  switch (v.index()) {
    case 0:
      return "";
    case 1:
      return "None";
    case 2:
      return as_bool() ? "True" : "False";
    case 3:
      return std::to_string(as_int());
    case 4: {
      std::string s;
      json::append_python_float(s, as_float());
      return s;
    }
    case 5:
      return str();
    default:
      return repr();
  }
}

std::string jvalue::repr() const {
  switch (v.index()) {
    case 5:
      return python_repr_string(str());
    case 6: {
      const auto& l = lst();
      if (l.lazy) return "<generator object at 0x0>";
      std::string s(1, l.tuple ? '(' : '[');
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) s += ", ";
        s += l.items[i].repr();
      }
      if (l.tuple && l.items.size() == 1) s += ',';
      s += l.tuple ? ')' : ']';
      return s;
    }
    case 7: {
      const auto& d = dct();
      if (d.is_namespace) return "<Namespace>";
      std::string s = "{";
      bool first = true;
      for (const auto& [k, val] : d.items) {
        if (!first) s += ", ";
        first = false;
        s += key_value(k).repr();
        s += ": ";
        s += val.repr();
      }
      return s + "}";
    }
    case 8:
      return "<function " + fn().name + ">";
    case 0:
      return "Undefined";  // jinja2's Undefined.__repr__
    default:
      return to_str();
  }
}

std::string jvalue::type_name() const {
  switch (v.index()) {
    case 0:
      return "Undefined";
    case 1:
      return "NoneType object";
    case 2:
      return "bool object";
    case 3:
      return "int object";
    case 4:
      return "float object";
    case 5:
      return "str object";
    case 6:
      return lst().tuple ? "tuple object" : "list object";
    case 7:
      return dct().is_namespace ? "Namespace object" : "dict object";
    default:
      return "function object";
  }
}

jvalue call_args::get(size_t i, std::string_view name, jvalue def) const {
  if (i < pos.size()) return pos[i];
  for (const auto& [k, v] : kw)
    if (k == name) return v;
  return def;
}

bool call_args::has(size_t i, std::string_view name) const {
  if (i < pos.size()) return true;
  for (const auto& [k, v] : kw)
    if (k == name) return true;
  return false;
}

bool equals(const jvalue& a, const jvalue& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.v.index() != b.v.index()) return false;
  switch (a.v.index()) {
    case 0:
    case 1:
      return true;
    case 5:
      return a.str() == b.str();
    case 6: {
      const auto& x = a.lst().items;
      const auto& y = b.lst().items;
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case 7: {
      const auto& x = a.dct();
      const auto& y = b.dct();
      if (&x == &y) return true;
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const jvalue* o = y.find(k);
        if (!o || !equals(v, *o)) return false;
      }
      return true;
    }
    case 8:
      return &a.fn() == &b.fn();
  }
  return false;
}

int compare(const jvalue& a, const jvalue& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_float(), y = b.as_float();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.str().compare(b.str());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list()) {
    const auto& x = a.lst().items;
    const auto& y = b.lst().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (int c = compare(x[i], y[i])) return c;
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  throw template_error("'<' not supported between instances of '" + a.type_name() + "' and '" +
                       b.type_name() + "'");
}

jvalue from_json(const json::value& v) {
  switch (v.type()) {
    case json::value::kind::null:
      return jvalue();
    case json::value::kind::boolean:
      return jvalue(v.as_bool());
    case json::value::kind::integer:
      return jvalue(v.as_int());
    case json::value::kind::floating:
      return jvalue(v.as_double());
    case json::value::kind::string:
      return jvalue(v.as_string());
    case json::value::kind::array: {
      std::vector<jvalue> items;
      items.reserve(v.size());
      for (const auto& x : v.as_array()) items.push_back(from_json(x));
      return jvalue::list(std::move(items));
    }
    case json::value::kind::object: {
      jvalue d = jvalue::dict();
      for (const auto& [k, x] : v.as_object()) d.dct().set(k, from_json(x));
      return d;
    }
  }
  return jvalue();
}

json::value to_json(const jvalue& v) {
  switch (v.v.index()) {
    case 0:
      throw template_error("Object of type Undefined is not JSON serializable");
    case 1:
      return json::value();
    case 2:
      return json::value(v.as_bool());
    case 3:
      return json::value(v.as_int());
    case 4:
      return json::value(v.as_float());
    case 5:
      return json::value(v.str());
    case 6: {
      if (v.lst().lazy) throw template_error("Object of type generator is not JSON serializable");
      json::array a;
      for (const auto& x : v.lst().items) a.push_back(to_json(x));
      return json::value(std::move(a));
    }
    case 7: {
      if (v.dct().is_namespace)
        throw template_error("Object of type Namespace is not JSON serializable");
      json::object o;
      for (const auto& [k, x] : v.dct().items)
        o.emplace_back(key_value(k).is_string() ? k : json::dump(to_json(key_value(k))),
                       to_json(x));
      return json::value(std::move(o));
    }
    default:
      throw template_error("Object of type function is not JSON serializable");
  }
}

}  // namespace coserve::jinja
