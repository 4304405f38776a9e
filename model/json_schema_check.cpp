#include "model/json_schema_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>

namespace coserve {
namespace {

constexpr int k_max_depth = 64;

// ---- keywords the grammar engine ignores
// ----------------------------------------------------------

std::string join_path(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

// f(subschema, its path, the keyword holding it) for every direct subschema of `node`; the first
// non-empty result, or "".
template <class F>
std::string each_subschema(const json::value& node, const std::string& path, F&& f) {
  for (const char* map :
       {"properties", "$defs", "definitions", "patternProperties", "dependentSchemas"})
    if (const json::value* m = node.find(map); m && m->is_object())
      for (const auto& [name, v] : m->as_object())
        if (auto r = f(v, join_path(path, map) + "." + name, map); !r.empty()) return r;
  for (const char* one :
       {"anyOf", "oneOf", "allOf", "prefixItems", "items", "additionalProperties", "propertyNames",
        "additionalItems", "unevaluatedProperties", "unevaluatedItems"})
    if (const json::value* v = node.find(one)) {
      if (v->is_array()) {
        for (size_t i = 0; i < v->as_array().size(); ++i)
          if (auto r =
                  f(v->as_array()[i], join_path(path, one) + "[" + std::to_string(i) + "]", one);
              !r.empty())
            return r;
      } else if (auto r = f(*v, join_path(path, one), one); !r.empty()) {
        return r;
      }
    }
  return {};
}

std::string unsupported_keyword(const json::value& node, const std::string& path, int depth) {
  if (!node.is_object() || depth > k_max_depth) return {};
  static constexpr const char* k_unsupported[] = {"not",
                                                  "if",
                                                  "then",
                                                  "else",
                                                  "dependentRequired",
                                                  "dependentSchemas",
                                                  "uniqueItems",
                                                  "contains",
                                                  "minContains",
                                                  "maxContains"};
  for (const char* k : k_unsupported)
    if (node.find(k)) return join_path(path, k);
  return each_subschema(node, path,
                        [&](const json::value& v, const std::string& p, std::string_view) {
                          return unsupported_keyword(v, p, depth + 1);
                        });
}

// ---- oneOf disjointness
// ---------------------------------------------------------------------------

// JSON types as bits; a number with no fractional part is an "integer" (JSON Schema's rule).
enum : uint8_t {
  t_null = 1,
  t_bool = 2,
  t_int = 4,
  t_frac = 8,
  t_string = 16,
  t_array = 32,
  t_object = 64
};
constexpr uint8_t t_all = 127;

uint8_t type_bit(const json::value& v) {
  if (v.is_null()) return t_null;
  if (v.is_bool()) return t_bool;
  if (v.is_int()) return t_int;
  if (v.is_double()) return std::trunc(v.as_double()) == v.as_double() ? t_int : t_frac;
  if (v.is_string()) return t_string;
  if (v.is_array()) return t_array;
  return t_object;
}

uint8_t type_name_bits(const json::value& t) {
  if (!t.is_string()) return t_all;
  const std::string& s = t.as_string();
  if (s == "null") return t_null;
  if (s == "boolean") return t_bool;
  if (s == "integer") return t_int;
  if (s == "number") return t_int | t_frac;
  if (s == "string") return t_string;
  if (s == "array") return t_array;
  if (s == "object") return t_object;
  return t_all;
}

// JSON Schema equality: numbers by value, objects regardless of member order.
bool json_equal(const json::value& a, const json::value& b) {
  if (a.is_number() && b.is_number()) return a == b;
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    const auto& x = a.as_array();
    const auto& y = b.as_array();
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (!json_equal(x[i], y[i])) return false;
    return true;
  }
  if (a.is_object()) {
    if (a.as_object().size() != b.as_object().size()) return false;
    for (const auto& [k, v] : a.as_object()) {
      const json::value* w = b.find(k);
      if (!w || !json_equal(v, *w)) return false;
    }
    return true;
  }
  return a == b;
}

// Type sets of the keywords that constrain one JSON type only.
uint8_t keyword_type(std::string_view k) {
  static constexpr std::pair<std::string_view, uint8_t> k_keywords[] = {
      {"minLength", t_string},
      {"maxLength", t_string},
      {"pattern", t_string},
      {"format", t_string},
      {"minimum", t_int | t_frac},
      {"maximum", t_int | t_frac},
      {"exclusiveMinimum", t_int | t_frac},
      {"exclusiveMaximum", t_int | t_frac},
      {"multipleOf", t_int | t_frac},
      {"properties", t_object},
      {"required", t_object},
      {"additionalProperties", t_object},
      {"patternProperties", t_object},
      {"minProperties", t_object},
      {"maxProperties", t_object},
      {"propertyNames", t_object},
      {"unevaluatedProperties", t_object},
      {"items", t_array},
      {"prefixItems", t_array},
      {"minItems", t_array},
      {"maxItems", t_array},
      {"additionalItems", t_array},
      {"unevaluatedItems", t_array}};
  for (const auto& [name, t] : k_keywords)
    if (name == k) return t;
  return 0;
}

class schema_walk {
 public:
  explicit schema_walk(const json::value& root) : root_(root) {}

  // xgrammar reads one keyword of a schema object, the first of $ref, const, enum, anyOf, oneOf,
  // allOf, type, then object or array keywords without a type, and ignores the others beside it.
  // The first constraint so ignored that could reject a value the grammar lets through, as
  // "path: 'k' beside 'D'", or "".
  // implied_type: xgrammar reads the node as this type's schema when it names none (propertyNames
  // are strings).
  std::string shadowed(const json::value& node, const std::string& path, int depth,
                       bool implied_type = false) const {
    if (depth > k_max_depth || !node.is_object()) return {};
    const std::string here = path.empty() ? "the schema" : path;
    static constexpr const char* k_dispatch[] = {"$ref",  "const", "enum",
                                                 "anyOf", "oneOf", "allOf"};
    const char* d = nullptr;
    for (const char* k : k_dispatch)
      if (node.find(k)) {
        d = k;
        break;
      }
    if (d) {
      const json::value& dv = *node.find(d);
      uint8_t produced = types_of_dispatch(node, d, depth);  // the JSON types the grammar may emit
      for (const auto& [k, v] : node.as_object()) {
        if (k == d) continue;
        bool ignored = false;
        if (k == "type") {
          ignored = (produced & types_of_type(v)) != produced;
        } else if (k == "const" || k == "enum" || k == "anyOf" || k == "oneOf" || k == "allOf" ||
                   k == "$ref") {
          ignored = !(std::string_view(d) == "const" && k == "enum" && v.is_array() &&
                      std::any_of(v.as_array().begin(), v.as_array().end(),
                                  [&](const json::value& e) { return json_equal(e, dv); }));
        } else if (const uint8_t t = keyword_type(k)) {
          ignored = (produced & t) != 0;
        }
        if (ignored)
          return here + ": '" + k + "' beside '" + d +
                 "' is not enforced (the grammar engine reads only '" + d +
                 "' in a schema object; move '" + k + "' into it)";
      }
    } else if (!implied_type && !node.find("type") && !node.find("properties") &&
               !node.find("additionalProperties") && !node.find("unevaluatedProperties") &&
               !node.find("items") && !node.find("prefixItems") && !node.find("unevaluatedItems")) {
      for (const auto& [k, v] : node.as_object())
        if (keyword_type(k))
          return here + ": '" + k + "' without a 'type' is not enforced (give the schema a 'type')";
    }
    return each_subschema(node, path,
                          [&](const json::value& v, const std::string& p, std::string_view key) {
                            return shadowed(v, p, depth + 1, key == "propertyNames");
                          });
  }

  // Walks every subschema; false as soon as one oneOf is not proven disjoint.
  bool all_disjoint(const json::value& node, int depth) {
    if (depth > k_max_depth) return false;
    if (node.is_array()) {
      for (const auto& v : node.as_array())
        if (!all_disjoint(v, depth + 1)) return false;
      return true;
    }
    if (!node.is_object()) return true;
    if (const json::value* one = node.find("oneOf"); one && one->is_array()) {
      const auto& arms = one->as_array();
      for (size_t i = 0; i < arms.size(); ++i)
        for (size_t j = i + 1; j < arms.size(); ++j)
          if (!disjoint(arms[i], arms[j])) return false;
    }
    for (const auto& [key, v] : node.as_object()) {
      if (key == "const" || key == "enum" || key == "default" || key == "examples")
        continue;  // data
      if (!all_disjoint(v, depth + 1)) return false;
    }
    return true;
  }

 private:
  // The schema a local "$ref" ("#", "#/$defs/a", "#/definitions/a/properties/b") points to.
  const json::value* resolve(const json::value& ref) const {
    if (!ref.is_string()) return nullptr;
    std::string_view p = ref.as_string();
    if (p.empty() || p[0] != '#') return nullptr;
    p.remove_prefix(1);
    const json::value* at = &root_;
    while (!p.empty()) {
      if (p[0] != '/') return nullptr;
      p.remove_prefix(1);
      const size_t end = std::min(p.find('/'), p.size());
      std::string token;
      for (size_t i = 0; i < end; ++i) {  // JSON pointer escapes: ~1 is '/', ~0 is '~'
        if (p[i] == '~' && i + 1 < end && (p[i + 1] == '0' || p[i + 1] == '1')) {
          token += p[i + 1] == '1' ? '/' : '~';
          ++i;
        } else {
          token += p[i];
        }
      }
      p.remove_prefix(end);
      if (at->is_object()) {
        at = at->find(token);
      } else if (at->is_array()) {
        if (token.empty() || token.find_first_not_of("0123456789") != std::string::npos)
          return nullptr;
        const size_t i = std::stoul(token);
        at = i < at->as_array().size() ? &at->as_array()[i] : nullptr;
      } else {
        return nullptr;
      }
      if (!at) return nullptr;
    }
    return at;
  }

  static uint8_t types_of_type(const json::value& ty) {
    if (!ty.is_array()) return type_name_bits(ty);
    uint8_t u = 0;
    for (const auto& v : ty.as_array()) u |= type_name_bits(v);
    return u;
  }

  // The JSON types the grammar may emit for a schema object read through keyword d alone.
  uint8_t types_of_dispatch(const json::value& node, std::string_view d, int depth) const {
    const json::value& v = *node.find(d);
    if (d == "const") return type_bit(v);
    if (d == "enum" && v.is_array()) {
      uint8_t u = 0;
      for (const auto& e : v.as_array()) u |= type_bit(e);
      return u;
    }
    if (d == "$ref") {
      const json::value* target = resolve(v);
      return target ? types(*target, depth + 1) : t_all;
    }
    if (v.is_array()) {
      uint8_t u = d == "allOf" ? t_all : 0;
      for (const auto& arm : v.as_array())
        u = d == "allOf" ? u & types(arm, depth + 1) : u | types(arm, depth + 1);
      return u;
    }
    return t_all;
  }

  // The JSON types a value valid under `s` may have (a superset; t_all when unknown).
  uint8_t types(const json::value& s, int depth) const {
    if (s.is_bool()) return s.as_bool() ? t_all : 0;
    if (!s.is_object() || depth > k_max_depth) return t_all;
    uint8_t t = t_all;
    if (const json::value* r = s.find("$ref")) {
      const json::value* target = resolve(*r);
      if (target) t &= types(*target, depth + 1);
    }
    if (const json::value* c = s.find("const")) t &= type_bit(*c);
    if (const json::value* e = s.find("enum"); e && e->is_array()) {
      uint8_t u = 0;
      for (const auto& v : e->as_array()) u |= type_bit(v);
      t &= u;
    }
    if (const json::value* ty = s.find("type")) t &= types_of_type(*ty);
    for (const char* k : {"anyOf", "oneOf"})
      if (const json::value* l = s.find(k); l && l->is_array()) {
        uint8_t u = 0;
        for (const auto& v : l->as_array()) u |= types(v, depth + 1);
        t &= u;
      }
    if (const json::value* l = s.find("allOf"); l && l->is_array())
      for (const auto& v : l->as_array()) t &= types(v, depth + 1);
    return t;
  }

  // The schema itself, or what its only constraint ("$ref" beside annotations) points to.
  const json::value& follow(const json::value& s, int depth = 0) const {
    if (!s.is_object() || depth > k_max_depth) return s;
    const json::value* r = s.find("$ref");
    if (!r) return s;
    for (const auto& [k, v] : s.as_object())
      if (k != "$ref" && k != "title" && k != "description" && k != "$comment" && k != "default" &&
          k != "examples")
        return s;
    const json::value* target = resolve(*r);
    return target ? follow(*target, depth + 1) : s;
  }

  // The values a schema allows when it is a const or an enum (after following a $ref).
  const json::value* finite(const json::value& s) const {
    const json::value& f = follow(s);
    if (!f.is_object()) return nullptr;
    if (const json::value* c = f.find("const")) return c;
    if (const json::value* e = f.find("enum"); e && e->is_array()) return e;
    return nullptr;
  }

  bool discriminated(const json::value& a, const json::value& b) const {
    const json::value& x = follow(a);
    const json::value& y = follow(b);
    const json::value* req = x.is_object() ? x.find("required") : nullptr;
    if (!req || !req->is_array()) return false;
    for (const auto& key : req->as_array()) {
      if (!key.is_string()) continue;
      const json::value* other_req = y.find("required");
      if (!other_req || !other_req->is_array() ||
          std::none_of(other_req->as_array().begin(), other_req->as_array().end(),
                       [&](const json::value& k) {
                         return k.is_string() && k.as_string() == key.as_string();
                       }))
        continue;
      const json::value* px = x.find("properties");
      const json::value* py = y.find("properties");
      const json::value* vx = px && px->is_object() ? px->find(key.as_string()) : nullptr;
      const json::value* vy = py && py->is_object() ? py->find(key.as_string()) : nullptr;
      if (!vx || !vy) continue;
      if (!finite_disjoint(*vx, *vy)) continue;
      return true;
    }
    return false;
  }

  bool finite_disjoint(const json::value& a, const json::value& b) const {
    const json::value* fa = finite(a);
    const json::value* fb = finite(b);
    if (!fa || !fb) return false;
    const json::value& sa = follow(a);
    const json::value& sb = follow(b);
    // const: one value (an array const is one array); enum: each element.
    const bool a_const = sa.find("const") != nullptr, b_const = sb.find("const") != nullptr;
    auto each_in = [](const json::value& v, bool is_const, auto&& f) {
      if (is_const || !v.is_array()) return f(v);
      for (const auto& e : v.as_array())
        if (f(e)) return true;
      return false;
    };
    return !each_in(*fa, a_const, [&](const json::value& x) {
      return each_in(*fb, b_const, [&](const json::value& y) { return json_equal(x, y); });
    });
  }

  bool disjoint(const json::value& a, const json::value& b) const {
    const uint8_t ta = types(a, 0), tb = types(b, 0);
    if ((ta & tb) == 0) return true;
    if (finite_disjoint(a, b)) return true;
    // Objects only on both sides, told apart by a required property's values.
    return ta == t_object && tb == t_object && discriminated(a, b);
  }

  const json::value& root_;
};

}  // namespace

std::string unsupported_schema_keyword(const json::value& schema) {
  return unsupported_keyword(schema, "", 0);
}

bool one_of_branches_disjoint(const json::value& schema) {
  return schema_walk(schema).all_disjoint(schema, 0);
}

std::string ignored_beside_keyword(const json::value& schema) {
  return schema_walk(schema).shadowed(schema, "", 0);
}

}  // namespace coserve
