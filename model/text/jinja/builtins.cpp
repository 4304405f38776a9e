// Filters, tests, attribute lookup and Python methods. Filters and str methods are tables sorted by
// name, one function per entry. Over 500 lines: the builtins share the same helpers (code points,
// Python string semantics); split by kind it would only move the helpers into a third file.
#include "model/text/jinja/builtins.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace coserve::jinja {
namespace {

// A code point of a UTF-8 string and its bytes; an invalid byte is one span with cp -1.
struct cp_span {
  int32_t cp;
  size_t pos, len;
};

std::vector<cp_span> spans(std::string_view s) {
  std::vector<cp_span> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    utf8proc_int32_t cp = -1;
    utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                          static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
    if (n <= 0) {
      out.push_back({-1, i, 1});
      ++i;
    } else {
      out.push_back({cp, i, static_cast<size_t>(n)});
      i += static_cast<size_t>(n);
    }
  }
  return out;
}

// Python's str.isspace() per code point (bidirectional class WS, B or S, or category Zs): what
// strip(), split() and isspace() treat as whitespace.
bool py_is_space(int32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

utf8proc_category_t category(int32_t cp) {
  return cp < 0 ? UTF8PROC_CATEGORY_CN : utf8proc_category(cp);
}
bool is_cased(int32_t cp) {
  const auto c = category(cp);
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}
bool py_is_alpha(int32_t cp) {
  const auto c = category(cp);
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT ||
         c == UTF8PROC_CATEGORY_LM || c == UTF8PROC_CATEGORY_LO;
}
bool py_is_decimal(int32_t cp) { return category(cp) == UTF8PROC_CATEGORY_ND; }
// str.isdigit: Numeric_Type Decimal or Digit. The Digit code points (superscripts, circled and
// parenthesized digits, ...) as Python 3.11 (Unicode 14) reports them.
bool py_is_digit(int32_t cp) {
  static constexpr std::pair<int32_t, int32_t> k_digit[] = {
      {0xB2, 0xB3},       {0xB9, 0xB9},       {0x1369, 0x1371},   {0x19DA, 0x19DA},
      {0x2070, 0x2070},   {0x2074, 0x2079},   {0x2080, 0x2089},   {0x2460, 0x2468},
      {0x2474, 0x247C},   {0x2488, 0x2490},   {0x24EA, 0x24EA},   {0x24F5, 0x24FD},
      {0x24FF, 0x24FF},   {0x2776, 0x277E},   {0x2780, 0x2788},   {0x278A, 0x2792},
      {0x10A40, 0x10A43}, {0x10E60, 0x10E68}, {0x11052, 0x1105A}, {0x1F100, 0x1F10A}};
  if (py_is_decimal(cp)) return true;
  for (auto [lo, hi] : k_digit)
    if (cp >= lo && cp <= hi) return true;
  return false;
}
// str.isnumeric: categories Nd, Nl, No, and the CJK ideographs with a numeric value (一, 二, 万,
// ... category Lo), as Python 3.11 reports them.
bool py_is_numeric(int32_t cp) {
  const auto c = category(cp);
  if (c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO)
    return true;
  static constexpr int32_t k_cjk[] = {
      0x3405,  0x3483,  0x382A,  0x3B4D,  0x4E00,  0x4E03,  0x4E07,  0x4E09,  0x4E5D,
      0x4E8C,  0x4E94,  0x4E96,  0x4EBF,  0x4EC0,  0x4EDF,  0x4EE8,  0x4F0D,  0x4F70,
      0x5104,  0x5146,  0x5169,  0x516B,  0x516D,  0x5341,  0x5343,  0x5344,  0x5345,
      0x534C,  0x53C1,  0x53C2,  0x53C3,  0x53C4,  0x56DB,  0x58F1,  0x58F9,  0x5E7A,
      0x5EFE,  0x5EFF,  0x5F0C,  0x5F0D,  0x5F0E,  0x5F10,  0x62FE,  0x634C,  0x67D2,
      0x6F06,  0x7396,  0x767E,  0x8086,  0x842C,  0x8CAE,  0x8CB3,  0x8D30,  0x9621,
      0x9646,  0x964C,  0x9678,  0x96F6,  0xF96B,  0xF973,  0xF978,  0xF9B2,  0xF9D1,
      0xF9D3,  0xF9FD,  0x20001, 0x20064, 0x200E2, 0x20121, 0x2092A, 0x20983, 0x2098C,
      0x2099C, 0x20AEA, 0x20AFD, 0x20B19, 0x22390, 0x22998, 0x23B1B, 0x2626D, 0x2F890};
  return std::binary_search(std::begin(k_cjk), std::end(k_cjk), cp);
}

// str.strip/lstrip/rstrip (and the trim filter): whitespace as Python defines it, or the code
// points of `chars`.
std::string py_strip(std::string_view s, const jvalue& chars, bool left, bool right) {
  const auto cps = spans(s);
  std::vector<int32_t> set;
  if (chars.is_string())
    for (const auto& c : spans(chars.str()))
      set.push_back(c.cp < 0 ? -1 - int32_t(uint8_t(chars.str()[c.pos])) : c.cp);
  auto strip_it = [&](const cp_span& c) {
    if (!chars.is_string()) return py_is_space(c.cp);
    const int32_t key = c.cp < 0 ? -1 - int32_t(uint8_t(s[c.pos])) : c.cp;
    return std::find(set.begin(), set.end(), key) != set.end();
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  if (b == e) return {};
  return std::string(s.substr(cps[b].pos, cps[e - 1].pos + cps[e - 1].len - cps[b].pos));
}

enum class case_kind { upper, lower, title };

// The unconditional multi-character mappings of Unicode's SpecialCasing.txt that Python applies
// and utf8proc's simple mappings lack, for the Latin letters chat templates meet (ß, the ff..st
// ligatures, ŉ, İ); nullptr where the simple mapping is Python's. Final sigma is to_lower's.
const char* special_case(int32_t cp, case_kind k) {
  struct entry {
    int32_t cp;
    const char *upper, *title, *lower;
  };
  static constexpr entry table[] = {
      {0x00df, "SS", "Ss", nullptr},           {0xfb00, "FF", "Ff", nullptr},
      {0xfb01, "FI", "Fi", nullptr},           {0xfb02, "FL", "Fl", nullptr},
      {0xfb03, "FFI", "Ffi", nullptr},         {0xfb04, "FFL", "Ffl", nullptr},
      {0xfb05, "ST", "St", nullptr},           {0xfb06, "ST", "St", nullptr},
      {0x0149, "\u02bcN", "\u02bcN", nullptr}, {0x0130, nullptr, nullptr, "i\u0307"},
  };
  for (const auto& e : table)
    if (e.cp == cp)
      return k == case_kind::upper ? e.upper : k == case_kind::title ? e.title : e.lower;
  return nullptr;
}

// Case mapping per code point: utf8proc's simple mappings plus special_case. Invalid UTF-8 bytes
// pass through unchanged.
template <class Map>
std::string map_case(const std::string& s, Map map, case_kind kind) {
  std::string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(s.size());
  while (left > 0) {
    utf8proc_int32_t cp = 0;
    utf8proc_ssize_t n = utf8proc_iterate(p, left, &cp);
    if (n <= 0) {
      out += static_cast<char>(*p);
      ++p;
      --left;
      continue;
    }
    if (const char* sp = special_case(cp, kind)) {
      out += sp;
    } else {
      utf8proc_uint8_t buf[4];
      utf8proc_ssize_t m = utf8proc_encode_char(map(cp), buf);
      out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(m));
    }
    p += n;
    left -= n;
  }
  return out;
}
std::string to_upper(const std::string& s) {
  return map_case(s, utf8proc_toupper, case_kind::upper);
}
// Unicode's Case_Ignorable: categories Mn, Me, Cf, Lm, Sk and the Word_Break MidLetter, MidNumLet
// and Single_Quote characters.
bool case_ignorable(int32_t cp) {
  if (cp < 0) return false;
  switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_SK:
      return true;
    default:
      break;
  }
  switch (cp) {
    case 0x27:
    case 0x2e:
    case 0x3a:
    case 0xb7:
    case 0x387:
    case 0x5f4:
    case 0x2018:
    case 0x2019:
    case 0x2024:
    case 0x2027:
    case 0xfe13:
    case 0xfe52:
    case 0xfe55:
    case 0xff07:
    case 0xff0e:
    case 0xff1a:
      return true;
    default:
      return false;
  }
}

// str.lower(): the simple mappings, special_case, and Final_Sigma as Python applies it: Σ becomes
// ς after a cased letter (case-ignorable ones skipped) when no cased letter follows.
std::string to_lower(const std::string& s) {
  if (s.find("\u03a3") == std::string::npos) return map_case(s, utf8proc_tolower, case_kind::lower);
  const auto cps = spans(s);
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < cps.size(); ++i) {
    const int32_t cp = cps[i].cp;
    if (cp < 0) {
      out += s[cps[i].pos];
      continue;
    }
    if (cp == 0x3a3) {
      size_t b = i;
      while (b > 0 && case_ignorable(cps[b - 1].cp)) --b;
      size_t a = i + 1;
      while (a < cps.size() && case_ignorable(cps[a].cp)) ++a;
      const bool final =
          b > 0 && is_cased(cps[b - 1].cp) && !(a < cps.size() && is_cased(cps[a].cp));
      append_cp(out, final ? 0x3c2 : 0x3c3);
      continue;
    }
    if (const char* sp = special_case(cp, case_kind::lower))
      out += sp;
    else
      append_cp(out, utf8proc_tolower(cp));
  }
  return out;
}
bool is_alpha_byte(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (static_cast<unsigned char>(c) >= 0x80);
}
// cp mapped to `kind` (special_case first), or as it is when !map.
void append_mapped(std::string& out, int32_t cp, case_kind kind, bool map) {
  if (!map) return append_cp(out, cp);
  if (const char* sp = special_case(cp, kind)) {
    out += sp;
    return;
  }
  append_cp(out, kind == case_kind::upper   ? utf8proc_toupper(cp)
                 : kind == case_kind::lower ? utf8proc_tolower(cp)
                                            : utf8proc_totitle(cp));
}
// str.title(): a cased code point after an uncased one goes to titlecase, after a cased one to
// lowercase; uncased ones (digits, punctuation, invalid bytes) pass through.
std::string py_title(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  bool prev_cased = false;
  for (const auto& c : spans(s)) {
    if (c.cp < 0) {
      out += s[c.pos];
      prev_cased = false;
      continue;
    }
    const bool cased = is_cased(c.cp);
    append_mapped(out, c.cp,
                  !cased       ? case_kind::upper
                  : prev_cased ? case_kind::lower
                               : case_kind::title,
                  cased);
    prev_cased = cased;
  }
  return out;
}
// The title filter (jinja2's do_title, not str.title()): words split at runs of whitespace and
// - ( { [ <; each word's first code point uppercased (upper(), so 'ﬁ' becomes 'FI'), the rest
// lowercased.
std::string jinja_title(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  bool word_start = true;
  for (const auto& c : spans(s)) {
    if (c.cp < 0) {
      out += s[c.pos];
      word_start = false;
      continue;
    }
    if (py_is_space(c.cp) || c.cp == '-' || c.cp == '(' || c.cp == '{' || c.cp == '[' ||
        c.cp == '<') {
      append_cp(out, c.cp);
      word_start = true;
      continue;
    }
    append_mapped(out, c.cp, word_start ? case_kind::upper : case_kind::lower, true);
    word_start = false;
  }
  return out;
}
// str.capitalize() (Python 3.8+): the first code point to titlecase, the rest to lowercase.
std::string py_capitalize(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  bool first = true;
  for (const auto& c : spans(s)) {
    if (c.cp < 0)
      out += s[c.pos];
    else
      append_mapped(out, c.cp, first ? case_kind::title : case_kind::lower, true);
    first = false;
  }
  return out;
}

std::string py_replace(const std::string& s, const std::string& from, const std::string& to,
                       int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` between every code point (and at both ends).
    auto cps = code_points(s);
    int64_t n = 0;
    for (const auto& cp : cps) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      out += cp;
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (true) {
    size_t f = s.find(from, pos);
    if (f == std::string::npos || (count >= 0 && n >= count)) break;
    out.append(s, pos, f - pos);
    out += to;
    pos = f + from.size();
    ++n;
  }
  out.append(s, pos);
  return out;
}

jvalue py_split(const std::string& s, const jvalue& sep, int64_t maxsplit) {
  std::vector<jvalue> parts;
  if (!sep.is_string()) {  // runs of Python whitespace separate; none at either end
    const auto cps = spans(s);
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && py_is_space(cps[i].cp)) ++i;
      if (i >= cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
        parts.emplace_back(s.substr(cps[i].pos));  // the rest as it is, trailing whitespace kept
        break;
      }
      size_t j = i;
      while (j < cps.size() && !py_is_space(cps[j].cp)) ++j;
      parts.emplace_back(s.substr(cps[i].pos, cps[j - 1].pos + cps[j - 1].len - cps[i].pos));
      i = j;
    }
    return jvalue::list(std::move(parts));
  }
  const std::string& d = sep.str();
  if (d.empty()) throw template_error("empty separator");
  size_t pos = 0;
  while (true) {
    size_t f = s.find(d, pos);
    if (f == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit))
      break;
    parts.emplace_back(s.substr(pos, f - pos));
    pos = f + d.size();
  }
  parts.emplace_back(s.substr(pos));
  return jvalue::list(std::move(parts));
}

// str.rsplit: split() from the right; with maxsplit the rest on the left is kept as it is.
jvalue py_rsplit(const std::string& s, const jvalue& sep, int64_t maxsplit) {
  std::vector<jvalue> parts;  // right to left, reversed at the end
  if (!sep.is_string()) {
    const auto cps = spans(s);
    size_t e = cps.size();
    while (e > 0) {
      while (e > 0 && py_is_space(cps[e - 1].cp)) --e;
      if (e == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
        parts.emplace_back(s.substr(0, cps[e - 1].pos + cps[e - 1].len));
        break;
      }
      size_t b = e;
      while (b > 0 && !py_is_space(cps[b - 1].cp)) --b;
      parts.emplace_back(s.substr(cps[b].pos, cps[e - 1].pos + cps[e - 1].len - cps[b].pos));
      e = b;
    }
  } else {
    const std::string& d = sep.str();
    if (d.empty()) throw template_error("empty separator");
    size_t end = s.size();
    while (true) {
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) break;
      if (end < d.size()) break;
      size_t f = s.rfind(d, end - d.size());
      if (f == std::string::npos) break;
      parts.emplace_back(s.substr(f + d.size(), end - f - d.size()));
      end = f;
    }
    parts.emplace_back(s.substr(0, end));
  }
  std::reverse(parts.begin(), parts.end());
  return jvalue::list(std::move(parts));
}

// str.splitlines: Python's line boundaries (\n, \r, \r\n, \v, \f, \x1c-\x1e, \x85, U+2028, U+2029).
jvalue py_splitlines(const std::string& s, bool keepends) {
  std::vector<jvalue> out;
  const auto cps = spans(s);
  size_t start = 0;  // byte offset of the current line
  for (size_t i = 0; i < cps.size(); ++i) {
    const int32_t c = cps[i].cp;
    const bool brk = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || (c >= 0x1c && c <= 0x1e) ||
                     c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) continue;
    const size_t line_end = cps[i].pos;  // before the break
    size_t next = cps[i].pos + cps[i].len;
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1].cp == '\n') next = cps[++i].pos + 1;
    out.emplace_back(s.substr(start, (keepends ? next : line_end) - start));
    start = next;
  }
  if (start < s.size()) out.emplace_back(s.substr(start));
  return jvalue::list(std::move(out));
}

// str.center / ljust / rjust: padded with one fill code point up to `width` code points.
std::string py_pad(const std::string& s, int64_t width, const jvalue& fill, char how,
                   const char* what = "width") {
  std::string f = " ";
  if (!fill.is_undefined() && !fill.is_none()) {
    if (!fill.is_string() || code_point_count(fill.str()) != 1)
      throw template_error("The fill character must be exactly one character long");
    f = fill.str();
  }
  const auto w = static_cast<int64_t>(width_arg(width, what));
  const auto len = static_cast<int64_t>(code_point_count(s));
  if (len >= w) return s;
  const int64_t total = w - len;
  const int64_t left = how == 'l' ? 0 : how == 'r' ? total : total / 2 + (total & w & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += f;
  out += s;
  for (int64_t i = left; i < total; ++i) out += f;
  return out;
}

jvalue make_method(std::string name, std::function<jvalue(call_args&)> fn) {
  auto f = new_func();
  f->name = std::move(name);
  f->fn = std::move(fn);
  return jvalue(std::move(f));
}

jvalue unsafe_method(const std::string& name, const jvalue& obj) {
  std::string msg = "access to attribute '" + name + "' of '" +
                    (obj.is_list() ? std::string("list") : std::string("dict")) +
                    "' object is unsafe.";
  return make_method(name, [msg](call_args&) -> jvalue { throw template_error(msg); });
}

bool prefix_match(const std::string& s, const jvalue& p, bool at_end) {
  auto one = [&](const std::string& x) {
    if (x.size() > s.size()) return false;
    return at_end ? s.compare(s.size() - x.size(), x.size(), x) == 0
                  : s.compare(0, x.size(), x) == 0;
  };
  if (p.is_list()) {
    for (const auto& x : p.lst().items)
      if (x.is_string() && one(x.str())) return true;
    return false;
  }
  if (!p.is_string()) throw template_error("startswith first arg must be str or a tuple of str");
  return one(p.str());
}

// ---- str methods: one function per method of Python's str, `s` the string it is bound to ----

template <bool Left, bool Right>
jvalue str_strip(const std::string& s, call_args& a) {
  return jvalue(py_strip(s, a.get(0, "chars", jvalue()), Left, Right));
}
jvalue str_split(const std::string& s, call_args& a) {
  jvalue mx = a.get(1, "maxsplit", jvalue(-1));
  return py_split(s, a.get(0, "sep", jvalue()), mx.as_int());
}
jvalue str_rsplit(const std::string& s, call_args& a) {
  jvalue mx = a.get(1, "maxsplit", jvalue(-1));
  return py_rsplit(s, a.get(0, "sep", jvalue()), mx.as_int());
}
jvalue str_splitlines(const std::string& s, call_args& a) {
  return py_splitlines(s, a.get(0, "keepends", jvalue(false)).truthy());
}
template <bool AtEnd>
jvalue str_startswith(const std::string& s, call_args& a) {
  return jvalue(prefix_match(s, a.get(0, "prefix"), AtEnd));
}
jvalue str_upper(const std::string& s, call_args&) { return jvalue(to_upper(s)); }
jvalue str_lower(const std::string& s, call_args&) { return jvalue(to_lower(s)); }
jvalue str_title(const std::string& s, call_args&) { return jvalue(py_title(s)); }
jvalue str_capitalize(const std::string& s, call_args&) { return jvalue(py_capitalize(s)); }
jvalue str_replace(const std::string& s, call_args& a) {
  return jvalue(py_replace(s, a.get(0, "old").to_str(), a.get(1, "new").to_str(),
                           a.get(2, "count", jvalue(-1)).as_int()));
}
jvalue str_format_method(const std::string& s, call_args& a) { return jvalue(str_format(s, a)); }
jvalue str_join(const std::string& s, call_args& a) {
  std::string out;
  bool first = true;
  for (const auto& x : iterate(a.get(0, "iterable"))) {
    if (!first) out += s;
    first = false;
    out += x.to_str();
  }
  return jvalue(out);
}

// find, index (raises where find answers -1) and rfind: the code-point index of `sub`.
enum class find_kind { find, index, rfind };
template <find_kind Kind>
jvalue str_find(const std::string& s, call_args& a) {
  std::string sub = a.get(0, "sub").to_str();
  size_t f = Kind == find_kind::rfind ? s.rfind(sub) : s.find(sub);
  if (f == std::string::npos) {
    if (Kind == find_kind::index) throw template_error("substring not found");
    return jvalue(-1);
  }
  return jvalue(static_cast<int64_t>(code_point_count(s.substr(0, f))));
}
jvalue str_rindex(const std::string& s, call_args& a) {
  const size_t f = s.rfind(a.get(0, "sub").to_str());
  if (f == std::string::npos) throw template_error("substring not found");
  return jvalue(static_cast<int64_t>(code_point_count(s.substr(0, f))));
}
jvalue str_count(const std::string& s, call_args& a) {
  std::string sub = a.get(0, "sub").to_str();
  if (sub.empty()) return jvalue(static_cast<int64_t>(code_point_count(s) + 1));
  int64_t n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
  return jvalue(n);
}

// Python's str.is*(): true when every code point passes and there is at least one.
template <bool (*Pred)(int32_t)>
jvalue str_all_of(const std::string& s, call_args&) {
  const auto cps = spans(s);
  return jvalue(!cps.empty() &&
                std::all_of(cps.begin(), cps.end(), [&](const cp_span& c) { return Pred(c.cp); }));
}
bool py_is_alnum(int32_t cp) { return py_is_alpha(cp) || py_is_numeric(cp); }
// XID_Start then XID_Continue, read as letters, letter numbers and '_' then also marks, decimal
// digits and connector punctuation (the Other_ID_* code points aside).
jvalue str_isidentifier(const std::string& s, call_args&) {
  const auto cps = spans(s);
  bool ok = !cps.empty();
  for (size_t i = 0; ok && i < cps.size(); ++i) {
    const int32_t cp = cps[i].cp;
    const auto c = category(cp);
    const bool start = py_is_alpha(cp) || c == UTF8PROC_CATEGORY_NL || cp == '_';
    ok = start || (i > 0 && (c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC ||
                             c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_PC));
  }
  return jvalue(ok);
}
jvalue str_istitle(const std::string& s, call_args&) {
  bool cased = false, prev_cased = false;
  for (const auto& c : spans(s)) {
    const auto cat = category(c.cp);
    if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) {
      if (prev_cased) return jvalue(false);
      prev_cased = cased = true;
    } else if (cat == UTF8PROC_CATEGORY_LL) {
      if (!prev_cased) return jvalue(false);
      prev_cased = cased = true;
    } else {
      prev_cased = false;
    }
  }
  return jvalue(cased);
}
jvalue str_islower(const std::string& s, call_args&) {
  return jvalue(to_lower(s) == s && to_upper(s) != s);
}
jvalue str_isupper(const std::string& s, call_args&) {
  return jvalue(to_upper(s) == s && to_lower(s) != s);
}

template <char How>  // 'c' center, 'l' ljust, 'r' rjust
jvalue str_pad(const std::string& s, call_args& a) {
  return jvalue(py_pad(s, a.get(0, "width").as_int(), a.get(1, "fillchar", jvalue()), How));
}
jvalue str_zfill(const std::string& s, call_args& a) {
  const bool sign = !s.empty() && (s[0] == '+' || s[0] == '-');
  std::string padded =
      py_pad(sign ? s.substr(1) : s, a.get(0, "width").as_int() - (sign ? 1 : 0), jvalue("0"), 'r');
  return jvalue(sign ? s.substr(0, 1) + padded : padded);
}
template <bool Right>
jvalue str_partition(const std::string& s, call_args& a) {
  const std::string d = a.get(0, "sep").to_str();
  if (d.empty()) throw template_error("empty separator");
  const size_t f = Right ? s.rfind(d) : s.find(d);
  if (f == std::string::npos)
    return Right ? jvalue::list({jvalue(""), jvalue(""), jvalue(s)}, true)
                 : jvalue::list({jvalue(s), jvalue(""), jvalue("")}, true);
  return jvalue::list({jvalue(s.substr(0, f)), jvalue(d), jvalue(s.substr(f + d.size()))}, true);
}
template <bool Suffix>
jvalue str_remove_affix(const std::string& s, call_args& a) {
  const std::string x = a.get(0, Suffix ? "suffix" : "prefix").to_str();
  if (x.empty() || x.size() > s.size()) return jvalue(s);
  if (Suffix)
    return jvalue(
        s.compare(s.size() - x.size(), x.size(), x) == 0 ? s.substr(0, s.size() - x.size()) : s);
  return jvalue(s.compare(0, x.size(), x) == 0 ? s.substr(x.size()) : s);
}
jvalue str_swapcase(const std::string& s, call_args&) {
  std::string out;
  for (const auto& c : spans(s)) {
    if (c.cp < 0) {
      out += s[c.pos];
      continue;
    }
    const auto cat = category(c.cp);
    if (cat == UTF8PROC_CATEGORY_LU)
      append_mapped(out, c.cp, case_kind::lower, true);
    else if (cat == UTF8PROC_CATEGORY_LL)
      append_mapped(out, c.cp, case_kind::upper, true);
    else
      append_cp(out, c.cp);
  }
  return jvalue(out);
}
jvalue str_casefold(const std::string& s, call_args&) {
  utf8proc_uint8_t* folded = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                   static_cast<utf8proc_ssize_t>(s.size()), &folded, UTF8PROC_CASEFOLD);
  if (n < 0) return jvalue(to_lower(s));  // invalid UTF-8: lowercase what can be
  std::string out(reinterpret_cast<const char*>(folded), static_cast<size_t>(n));
  std::free(folded);
  return jvalue(out);
}
jvalue str_expandtabs(const std::string& s, call_args& a) {
  const int64_t tab = a.get(0, "tabsize", jvalue(8)).as_int();
  std::string out;
  int64_t col = 0;
  for (const auto& c : spans(s)) {
    if (c.cp == '\t') {
      if (tab > 0) {
        const int64_t n = tab - col % tab;
        out.append(width_arg(n, "tabsize"), ' ');
        if (out.size() > static_cast<size_t>(k_max_width) * 16)
          throw template_error("expandtabs would build a string over 16 MiB");
        col += n;
      }
    } else {
      out.append(s, c.pos, c.len);
      col = c.cp == '\n' || c.cp == '\r' ? 0 : col + 1;
    }
  }
  return jvalue(out);
}

// A name-sorted table of builtins (filters, str methods), looked up by binary search.
template <class Fn>
struct named {
  std::string_view name;
  Fn fn;
};
template <class Fn, size_t N>
constexpr bool sorted_by_name(const named<Fn> (&table)[N]) {
  for (size_t i = 1; i < N; ++i)
    if (!(table[i - 1].name < table[i].name)) return false;
  return true;
}
template <class Fn, size_t N>
const named<Fn>* find_named(const named<Fn> (&table)[N], std::string_view name) {
  const named<Fn>* it = std::lower_bound(
      table, table + N, name, [](const named<Fn>& e, std::string_view n) { return e.name < n; });
  return it != table + N && it->name == name ? it : nullptr;
}

using str_method_fn = jvalue (*)(const std::string& s, call_args& a);
constexpr named<str_method_fn> k_str_methods[] = {
    {"capitalize", str_capitalize},
    {"casefold", str_casefold},
    {"center", str_pad<'c'>},
    {"count", str_count},
    {"endswith", str_startswith<true>},
    {"expandtabs", str_expandtabs},
    {"find", str_find<find_kind::find>},
    {"format", str_format_method},
    {"index", str_find<find_kind::index>},
    {"isalnum", str_all_of<py_is_alnum>},
    {"isalpha", str_all_of<py_is_alpha>},
    {"isdecimal", str_all_of<py_is_decimal>},
    {"isdigit", str_all_of<py_is_digit>},
    {"isidentifier", str_isidentifier},
    {"islower", str_islower},
    {"isnumeric", str_all_of<py_is_numeric>},
    {"isspace", str_all_of<py_is_space>},
    {"istitle", str_istitle},
    {"isupper", str_isupper},
    {"join", str_join},
    {"ljust", str_pad<'l'>},
    {"lower", str_lower},
    {"lstrip", str_strip<true, false>},
    {"partition", str_partition<false>},
    {"removeprefix", str_remove_affix<false>},
    {"removesuffix", str_remove_affix<true>},
    {"replace", str_replace},
    {"rfind", str_find<find_kind::rfind>},
    {"rindex", str_rindex},
    {"rjust", str_pad<'r'>},
    {"rpartition", str_partition<true>},
    {"rsplit", str_rsplit},
    {"rstrip", str_strip<false, true>},
    {"split", str_split},
    {"splitlines", str_splitlines},
    {"startswith", str_startswith<false>},
    {"strip", str_strip<true, true>},
    {"swapcase", str_swapcase},
    {"title", str_title},
    {"upper", str_upper},
    {"zfill", str_zfill},
};
static_assert(sorted_by_name(k_str_methods), "k_str_methods must stay sorted by name");

// `s.name` for a str s: the method bound to s, or undefined for a name str lacks.
jvalue string_method(const jvalue& obj, const std::string& name) {
  const named<str_method_fn>* m = find_named(k_str_methods, name);
  if (m == nullptr) return jvalue::undefined("'str object' has no attribute '" + name + "'");
  return make_method(name, [s = obj.str(), fn = m->fn](call_args& a) { return fn(s, a); });
}

jvalue dict_method(const jvalue& obj, const std::string& name) {
  auto d = std::get<7>(obj.v);
  if (name == "get")
    return make_method(name, [d](call_args& a) {
      jvalue k = a.get(0, "key");
      const jvalue* v = d->find(dict_key(k));
      return v ? *v : a.get(1, "default", jvalue());
    });
  if (name == "items")
    return make_method(name, [d](call_args&) {
      std::vector<jvalue> out;
      for (const auto& [k, v] : d->items) out.push_back(jvalue::list({key_value(k), v}, true));
      return jvalue::list(std::move(out));
    });
  if (name == "keys")
    return make_method(name, [d](call_args&) {
      std::vector<jvalue> out;
      for (const auto& kv : d->items) out.push_back(key_value(kv.first));
      return jvalue::list(std::move(out));
    });
  if (name == "values")
    return make_method(name, [d](call_args&) {
      std::vector<jvalue> out;
      for (const auto& kv : d->items) out.push_back(kv.second);
      return jvalue::list(std::move(out));
    });
  if (name == "copy")
    return make_method(name, [d](call_args&) {
      auto c = new_dict();
      *c = *d;
      return jvalue(std::move(c));
    });
  if (name == "pop" || name == "update" || name == "setdefault" || name == "clear" ||
      name == "popitem")
    return unsafe_method(name, obj);
  return jvalue::undefined("'dict object' has no attribute '" + name + "'");
}

jvalue list_method(const jvalue& obj, const std::string& name) {
  auto l = std::get<6>(obj.v);
  if (l->group && l->items.size() == 2 && (name == "grouper" || name == "list"))
    return l->items[name == "list"];
  if (name == "copy")
    return make_method(name, [l](call_args&) {
      std::vector<jvalue> items = l->items;
      return jvalue::list(std::move(items));
    });
  if (name == "index")
    return make_method(name, [l](call_args& a) {
      jvalue x = a.get(0, "value");
      for (size_t i = 0; i < l->items.size(); ++i)
        if (equals(l->items[i], x)) return jvalue(i);
      throw template_error("value is not in list");
    });
  if (name == "count")
    return make_method(name, [l](call_args& a) {
      jvalue x = a.get(0, "value");
      int64_t n = 0;
      for (const auto& y : l->items) n += equals(x, y);
      return jvalue(n);
    });
  if (name == "append" || name == "pop" || name == "extend" || name == "insert" ||
      name == "remove" || name == "clear" || name == "sort" || name == "reverse")
    return unsafe_method(name, obj);
  return jvalue::undefined("'" + obj.type_name() + "' has no attribute '" + name + "'");
}

jvalue slice_items_first(const jvalue& v) {
  auto items = iterate(v);
  return items.empty() ? jvalue::undefined("No first item, sequence was empty.") : items.front();
}

// Sort key for sort/dictsort/unique/min/max: lower-cased strings unless case-sensitive.
jvalue sort_key(const jvalue& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return jvalue(to_lower(v.str()));
  return v;
}

jvalue attr_path(const jvalue& v, const jvalue& attribute) {
  if (attribute.is_int()) return get_item(v, attribute);
  if (!attribute.is_string()) return v;
  jvalue cur = v;
  const std::string& path = attribute.str();
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(),
                                                [](char c) { return c >= '0' && c <= '9'; });
    cur = numeric ? get_item(cur, jvalue(static_cast<int64_t>(std::stoll(part))))
                  : get_item(cur, jvalue(part));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

call_args shift_args(const call_args& a, size_t n) {
  call_args out;
  for (size_t i = n; i < a.pos.size(); ++i) out.pos.push_back(a.pos[i]);
  out.kw = a.kw;
  return out;
}

jvalue select_like(const jvalue& seq, const call_args& args, bool by_attr, bool keep_when) {
  std::vector<jvalue> out;
  if (!seq.truthy()) return jvalue::list({}, false);
  size_t consumed = by_attr ? 1 : 0;
  jvalue attr = by_attr ? args.get(0, "\x01") : jvalue();
  bool has_test = args.pos.size() > consumed;
  std::string test = has_test ? args.pos[consumed].to_str() : std::string();
  call_args rest = shift_args(args, consumed + 1);
  rest.kw.clear();
  for (const auto& x : iterate(seq)) {
    jvalue subject = by_attr ? attr_path(x, attr) : x;
    bool r = has_test ? apply_test(test, subject, rest) : subject.truthy();
    if (r == keep_when) out.push_back(x);
  }
  jvalue res = jvalue::list(std::move(out));
  res.lst().lazy = true;
  return res;
}

std::string py_splitlines_indent(const std::string& text, const std::string& ind, bool first,
                                 bool blank) {
  // str.splitlines: every Python line boundary (U+2028, \x85, \v, ... too), as jinja2's do_indent.
  std::vector<std::string> lines;
  const jvalue split = py_splitlines(text + "\n", false);
  for (const auto& l : split.lst().items) lines.push_back(l.str());
  std::string rv;
  if (blank) {
    for (size_t k = 0; k < lines.size(); ++k) {
      if (k) rv += "\n" + ind;
      rv += lines[k];
    }
  } else {
    rv = lines.empty() ? std::string() : lines[0];
    for (size_t k = 1; k < lines.size(); ++k) {
      rv += "\n";
      if (!lines[k].empty()) rv += ind;
      rv += lines[k];
    }
  }
  if (first) rv = ind + rv;
  return rv;
}

jvalue to_int(const jvalue& v, const jvalue& def) {
  if (v.is_number()) return jvalue(v.as_int());
  if (v.is_string()) {
    std::string s = py_strip(v.str(), jvalue(), true, true);
    try {
      size_t used = 0;
      long long n = std::stoll(s, &used, 10);
      if (used == s.size()) return jvalue(static_cast<int64_t>(n));
      double d = std::stod(s, &used);
      if (used == s.size()) return jvalue(static_cast<int64_t>(d));
    } catch (const std::exception&) {
    }
  }
  return def;
}

jvalue to_float(const jvalue& v, const jvalue& def) {
  if (v.is_number()) return jvalue(v.as_float());
  if (v.is_string()) {
    std::string s = py_strip(v.str(), jvalue(), true, true);
    try {
      size_t used = 0;
      double d = std::stod(s, &used);
      if (used == s.size()) return jvalue(d);
    } catch (const std::exception&) {
    }
  }
  return def;
}

}  // namespace

std::string python_strip(std::string_view s, bool left, bool right) {
  return py_strip(s, jvalue(), left, right);
}

void append_cp(std::string& out, int32_t cp) {
  utf8proc_uint8_t buf[4];
  utf8proc_ssize_t m = utf8proc_encode_char(cp, buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(m));
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {

// markupsafe's Markup.striptags(): comments, then tags removed, whitespace runs collapsed to one
// space, then the entities html.unescape knows best decoded (numeric ones, and amp, lt, gt, quot,
// apos, nbsp; other named entities stay as written).
std::string strip_tags(std::string v) {
  for (size_t b; (b = v.find("<!--")) != std::string::npos;) {
    const size_t e = v.find("-->", b);
    if (e == std::string::npos) break;
    v.erase(b, e + 3 - b);
  }
  for (size_t b; (b = v.find('<')) != std::string::npos;) {
    const size_t e = v.find('>', b);
    if (e == std::string::npos) break;
    v.erase(b, e + 1 - b);
  }
  std::string joined;
  const jvalue words = py_split(v, jvalue(), -1);
  for (const auto& w : words.lst().items) {
    if (!joined.empty()) joined += ' ';
    joined += w.str();
  }
  std::string out;
  for (size_t i = 0; i < joined.size();) {
    if (joined[i] == '&') {
      const size_t semi = joined.find(';', i);
      if (semi != std::string::npos && semi - i <= 10) {
        const std::string ent = joined.substr(i + 1, semi - i - 1);
        int32_t cp = -1;
        if (ent.size() > 1 && ent[0] == '#') {
          const bool hex = ent[1] == 'x' || ent[1] == 'X';
          const std::string digits = ent.substr(hex ? 2 : 1);
          if (!digits.empty() &&
              digits.find_first_not_of(hex ? "0123456789abcdefABCDEF" : "0123456789") ==
                  std::string::npos) {
            const long n = std::strtol(digits.c_str(), nullptr, hex ? 16 : 10);
            cp = (n <= 0 || n > 0x10FFFF || (n >= 0xD800 && n <= 0xDFFF)) ? 0xFFFD
                                                                          : static_cast<int32_t>(n);
          }
        } else if (ent == "amp")
          cp = '&';
        else if (ent == "lt")
          cp = '<';
        else if (ent == "gt")
          cp = '>';
        else if (ent == "quot")
          cp = '"';
        else if (ent == "apos")
          cp = '\'';
        else if (ent == "nbsp")
          cp = 0xA0;
        if (cp >= 0) {
          append_cp(out, cp);
          i = semi + 1;
          continue;
        }
      }
    }
    out += joined[i++];
  }
  return out;
}

// jinja2's filesizeformat: decimal (kB, MB, ...) or binary (KiB, MiB, ...) prefixes, one decimal.
std::string file_size(double bytes, bool binary) {
  static constexpr const char* k_dec[] = {"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
  static constexpr const char* k_bin[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
  const double base = binary ? 1024.0 : 1000.0;
  char buf[64];
  if (bytes == 1.0) return "1 Byte";
  if (bytes < base) {
    std::snprintf(buf, sizeof buf, "%lld Bytes",
                  static_cast<long long>(bytes));  // int(): toward zero
    return buf;
  }
  double unit = base;
  for (int i = 0; i < 8; ++i) {
    unit *= base;
    if (bytes < unit || i == 7) {
      const double x = base * bytes / unit;
      const char* prefix = binary ? k_bin[i] : k_dec[i];
      std::string out(static_cast<size_t>(std::snprintf(nullptr, 0, "%.1f %s", x, prefix)), '\0');
      std::snprintf(out.data(), out.size() + 1, "%.1f %s", x, prefix);
      return out;
    }
  }
  return {};
}

// urllib's quote_from_bytes over UTF-8: letters, digits and "_.-~" (and '/' unless for_qs) kept,
// the rest %XX; for_qs also turns %20 into '+' (jinja2's url_quote).
std::string url_quote(const std::string& v, bool for_qs) {
  static constexpr char k_hex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : v) {
    if (std::isalnum(c) || c == '_' || c == '.' || c == '-' || c == '~' || (!for_qs && c == '/')) {
      out += static_cast<char>(c);
    } else if (for_qs && c == ' ') {
      out += '+';
    } else {
      out += '%';
      out += k_hex[c >> 4];
      out += k_hex[c & 15];
    }
  }
  return out;
}

}  // namespace

namespace {
size_t code_point_bytes(std::string_view s, size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  return std::min(len, s.size() - i);
}
}  // namespace

std::vector<std::string> code_points(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const size_t len = code_point_bytes(s, i);
    out.emplace_back(s.substr(i, len));
    i += len;
  }
  return out;
}

std::vector<size_t> code_point_offsets(std::string_view s) {
  std::vector<size_t> out;
  out.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size(); i += code_point_bytes(s, i)) out.push_back(i);
  out.push_back(s.size());
  return out;
}

size_t code_point_count(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += code_point_bytes(s, i)) ++n;
  return n;
}

std::vector<jvalue> iterate(const jvalue& v) {
  if (v.is_list()) return v.lst().items;
  if (v.is_dict()) {
    std::vector<jvalue> out;
    for (const auto& kv : v.dct().items) out.push_back(key_value(kv.first));
    return out;
  }
  if (v.is_string()) {
    std::vector<jvalue> out;
    for (auto& cp : code_points(v.str())) out.emplace_back(std::move(cp));
    return out;
  }
  if (v.is_undefined()) return {};
  throw template_error("'" + v.type_name() + "' is not iterable");
}

bool contains(const jvalue& container, const jvalue& item) {
  if (container.is_string()) {
    if (!item.is_string()) throw template_error("'in <string>' requires string as left operand");
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_dict()) return container.dct().find(dict_key(item)) != nullptr;
  if (container.is_list()) {
    for (const auto& x : container.lst().items)
      if (equals(x, item)) return true;
    return false;
  }
  if (container.is_undefined()) return false;  // jinja2's Undefined iterates as empty
  throw template_error("argument of type '" + container.type_name() + "' is not iterable");
}

jvalue get_attr(const jvalue& obj, std::string_view name_sv) {
  std::string name(name_sv);
  if (obj.is_undefined()) throw template_error(obj.undefined_hint());
  if (obj.is_dict()) {
    if (!obj.dct().is_namespace) {
      jvalue m = dict_method(obj, name);
      if (!m.is_undefined()) return m;
    }
    if (const jvalue* v = obj.dct().find(name)) return *v;
    return jvalue::undefined("'" + obj.type_name() + "' has no attribute '" + name + "'");
  }
  if (obj.is_string()) return string_method(obj, name);
  if (obj.is_list()) return list_method(obj, name);
  return jvalue::undefined("'" + obj.type_name() + "' has no attribute '" + name + "'");
}

jvalue get_item(const jvalue& obj, const jvalue& key) {
  if (obj.is_undefined()) throw template_error(obj.undefined_hint());
  if (obj.is_dict() && key.is_string()) {
    if (const jvalue* v = obj.dct().find(key.str())) return *v;
    if (!obj.dct().is_namespace) {
      jvalue m = dict_method(obj, key.str());
      if (!m.is_undefined()) return m;
    }
    return jvalue::undefined("'" + obj.type_name() + "' has no attribute '" + key.str() + "'");
  }
  if (obj.is_dict() && (key.is_number() || key.is_none())) {
    if (const jvalue* v = obj.dct().find(dict_key(key))) return *v;
    return jvalue::undefined("'" + obj.type_name() + "' has no attribute '" + key.to_str() + "'");
  }
  if (obj.is_list() && obj.lst().lazy)
    throw template_error("'generator' object is not subscriptable");
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      const auto& items = obj.lst().items;
      auto n = static_cast<int64_t>(items.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n)
        return jvalue::undefined(obj.type_name() + " has no element " + key.to_str());
      return items[static_cast<size_t>(i)];
    }
    auto cps = code_points(obj.str());
    auto n = static_cast<int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return jvalue::undefined("str object has no element " + key.to_str());
    return jvalue(cps[static_cast<size_t>(i)]);
  }
  if (key.is_string()) return get_attr(obj, key.str());
  return jvalue::undefined("'" + obj.type_name() + "' has no attribute '" + key.to_str() + "'");
}

std::string to_json_text(const jvalue& v, const call_args& args) {
  json::dump_options o;
  jvalue indent = args.get(0, "indent", jvalue());
  if (indent.is_int())
    o.indent = indent.as_int() < 0 ? -1 : static_cast<int>(width_arg(indent.as_int(), "indent"));
  o.ensure_ascii = args.get(SIZE_MAX, "ensure_ascii", jvalue(false)).truthy();
  o.sort_keys = args.get(SIZE_MAX, "sort_keys", jvalue(false)).truthy();
  jvalue seps = args.get(SIZE_MAX, "separators", jvalue());
  std::string item_sep = o.indent >= 0 ? "," : ", ", key_sep = ": ";
  if (seps.is_list() && seps.lst().items.size() == 2) {
    item_sep = seps.lst().items[0].to_str();
    key_sep = seps.lst().items[1].to_str();
  }
  o.item_sep = item_sep;
  o.key_sep = key_sep;
  return json::dump(to_json(v), o);
}

bool is_known_test(std::string_view n) {
  static constexpr std::string_view names[] = {
      "defined", "undefined", "none",   "boolean", "false",       "true",        "integer",
      "float",   "number",    "string", "mapping", "iterable",    "sequence",    "callable",
      "sameas",  "escaped",   "in",     "odd",     "even",        "divisibleby", "eq",
      "equalto", "==",        "ne",     "!=",      "lt",          "<",           "lessthan",
      "le",      "<=",        "gt",     ">",       "greaterthan", "ge",          ">=",
      "lower",   "upper",     "filter", "test"};
  return std::find(std::begin(names), std::end(names), n) != std::end(names);
}

// jinja2's default filters plus transformers' tojson: what the `filter` test knows (some of them,
// such as urlize, are not implemented here and fail when used).
bool is_known_filter(std::string_view n) {
  static constexpr std::string_view names[] = {
      "abs",       "attr",       "batch",       "capitalize", "center",  "count",
      "d",         "default",    "dictsort",    "e",          "escape",  "filesizeformat",
      "first",     "float",      "forceescape", "format",     "groupby", "indent",
      "int",       "join",       "last",        "length",     "list",    "lower",
      "items",     "map",        "min",         "max",        "pprint",  "random",
      "reject",    "rejectattr", "replace",     "reverse",    "round",   "safe",
      "select",    "selectattr", "slice",       "sort",       "string",  "striptags",
      "sum",       "title",      "trim",        "truncate",   "unique",  "upper",
      "urlencode", "urlize",     "wordcount",   "wordwrap",   "xmlattr", "tojson"};
  return std::find(std::begin(names), std::end(names), n) != std::end(names);
}

bool apply_test(std::string_view name, const jvalue& v, const call_args& a) {
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict() && !v.dct().is_namespace;
  // jinja2's Undefined has __iter__, __len__ and __getitem__: iterable and a sequence.
  if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (name == "callable")
    return v.is_func() || v.is_undefined();  // jinja2's Undefined has __call__
  if (name == "escaped") return false;
  // jinja2: str(value).islower() / .isupper(): at least one cased code point, none of the other
  // case.
  if (name == "lower") {
    const std::string t = v.to_str();
    return to_lower(t) == t && to_upper(t) != t;
  }
  if (name == "upper") {
    const std::string t = v.to_str();
    return to_upper(t) == t && to_lower(t) != t;
  }
  jvalue arg = a.get(0, "\x01");
  if (name == "sameas") {
    if (v.is_list() && arg.is_list()) return &v.lst() == &arg.lst();
    if (v.is_dict() && arg.is_dict()) return &v.dct() == &arg.dct();
    return v.v.index() == arg.v.index() && equals(v, arg);
  }
  if (name == "in") return contains(arg, v);
  if ((name == "odd" || name == "even") && v.is_float()) {
    // Python's value % 2 for floats (the divisor's sign): odd is == 1, even is == 0.
    double r = std::fmod(v.as_float(), 2.0);
    if (r < 0) r += 2.0;
    return name == "odd" ? r == 1.0 : r == 0.0;
  }
  if (name == "odd") return v.as_int() % 2 != 0;
  if (name == "even") return v.as_int() % 2 == 0;
  if (name == "divisibleby") {
    if (v.is_float() || arg.is_float()) {  // Python's value % num == 0 in floats
      if (arg.as_float() == 0.0) throw template_error("float modulo by zero");
      return std::fmod(v.as_float(), arg.as_float()) == 0.0;
    }
    if (arg.as_int() == 0) throw template_error("integer modulo by zero");
    return v.as_int() % arg.as_int() == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, arg);
  if (name == "ne" || name == "!=") return !equals(v, arg);
  if (name == "lt" || name == "<" || name == "lessthan") return compare(v, arg) < 0;
  if (name == "le" || name == "<=") return compare(v, arg) <= 0;
  if (name == "gt" || name == ">" || name == "greaterthan") return compare(v, arg) > 0;
  if (name == "ge" || name == ">=") return compare(v, arg) >= 0;
  if (name == "filter") return v.is_string() && is_known_filter(v.str());
  if (name == "test") return v.is_string() && is_known_test(v.str());
  throw template_error("No test named '" + std::string(name) + "'.");
}

namespace {

// ---- filters: one function per jinja2 filter, `v` the value filtered ----

using filter_fn = jvalue (*)(const jvalue& v, const call_args& a);

jvalue filter_tojson(const jvalue& v, const call_args& a) { return jvalue(to_json_text(v, a)); }
jvalue filter_safe(const jvalue& v, const call_args&) {
  jvalue s(v.to_str());
  s.markup = true;
  return s;
}
jvalue filter_string(const jvalue& v, const call_args&) { return jvalue(v.to_str()); }
jvalue filter_escape(const jvalue& v, const call_args&) { return jvalue(html_escape(v.to_str())); }
jvalue filter_default(const jvalue& v, const call_args& a) {
  bool boolean = a.get(1, "boolean", jvalue(false)).truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return a.get(0, "default_value", jvalue(""));
  return v;
}
jvalue filter_length(const jvalue& v, const call_args&) {
  if (v.is_string()) return jvalue(code_point_count(v.str()));
  if (v.is_list() && v.lst().lazy) throw template_error("object of type 'generator' has no len()");
  if (v.is_list()) return jvalue(v.lst().items.size());
  if (v.is_dict()) return jvalue(v.dct().items.size());
  if (v.is_undefined()) return jvalue(0);
  throw template_error("object of type '" + v.type_name() + "' has no len()");
}
jvalue filter_first(const jvalue& v, const call_args&) { return slice_items_first(v); }
jvalue filter_last(const jvalue& v, const call_args&) {
  auto items = iterate(v);
  return items.empty() ? jvalue::undefined("No last item, sequence was empty.") : items.back();
}

// String filters.
jvalue filter_trim(const jvalue& v, const call_args& a) {
  return jvalue(py_strip(v.to_str(), a.get(0, "chars", jvalue()), true, true));
}
jvalue filter_upper(const jvalue& v, const call_args&) { return jvalue(to_upper(v.to_str())); }
jvalue filter_lower(const jvalue& v, const call_args&) { return jvalue(to_lower(v.to_str())); }
jvalue filter_capitalize(const jvalue& v, const call_args&) {
  return jvalue(py_capitalize(v.to_str()));
}
jvalue filter_title(const jvalue& v, const call_args&) { return jvalue(jinja_title(v.to_str())); }
jvalue filter_replace(const jvalue& v, const call_args& a) {
  jvalue count = a.get(2, "count", jvalue());
  return jvalue(py_replace(v.to_str(), a.get(0, "old").to_str(), a.get(1, "new").to_str(),
                           count.is_none() ? -1 : count.as_int()));
}
jvalue filter_wordcount(const jvalue& v, const call_args&) {
  int64_t n = 0;
  bool in_word = false;
  for (char c : v.to_str()) {
    bool w = is_alpha_byte(c) || (c >= '0' && c <= '9') || c == '_';
    if (w && !in_word) ++n;
    in_word = w;
  }
  return jvalue(n);
}
jvalue filter_indent(const jvalue& v, const call_args& a) {
  // jinja2 appends "\n" to the value first: anything but a string is a TypeError there.
  if (!v.is_string())
    throw template_error("unsupported operand type(s) for +=: '" + v.type_name() + "' and 'str'");
  jvalue width = a.get(0, "width", jvalue(4));
  std::string ind =
      width.is_string() ? width.str() : std::string(width_arg(width.as_int(), "indent width"), ' ');
  return jvalue(py_splitlines_indent(v.to_str(), ind, a.get(1, "first", jvalue(false)).truthy(),
                                     a.get(2, "blank", jvalue(false)).truthy()));
}
jvalue filter_center(const jvalue& v, const call_args& a) {
  return jvalue(
      py_pad(v.to_str(), a.get(0, "width", jvalue(80)).as_int(), jvalue(), 'c', "center width"));
}
jvalue filter_format(const jvalue& v, const call_args& a) {
  std::vector<jvalue> items = a.pos;
  return jvalue(percent_format(v.to_str(), jvalue::list(std::move(items), true)));
}
jvalue filter_pprint(const jvalue& v, const call_args&) { return jvalue(v.repr()); }
jvalue filter_striptags(const jvalue& v, const call_args&) {
  return jvalue(strip_tags(v.to_str()));
}
jvalue filter_truncate(const jvalue& v, const call_args& a) {
  int64_t len = a.get(0, "length", jvalue(255)).as_int();
  auto cps = code_points(v.to_str());
  std::string end = a.get(2, "end", jvalue("...")).to_str();
  int64_t leeway = a.get(3, "leeway", jvalue(5)).as_int();
  // 128-bit sums: len and leeway may be any int64.
  if (static_cast<wide_int>(cps.size()) <= wide_int{len} + leeway) return jvalue(v.to_str());
  std::string out;
  for (int64_t i = 0; i < wide_int{len} - static_cast<wide_int>(end.size()) &&
                      i < static_cast<int64_t>(cps.size());
       ++i)
    out += cps[static_cast<size_t>(i)];
  if (!a.get(1, "killwords", jvalue(false)).truthy()) {
    size_t sp = out.rfind(' ');
    if (sp != std::string::npos) out.resize(sp);
  }
  return jvalue(out + end);
}

// Number filters. int(Undefined) and float(Undefined) raise in jinja2 (the filters catch only
// TypeError and ValueError).
void refuse_undefined_number(const jvalue& v) {
  if (v.is_undefined())
    throw template_error(v.undefined_hint().empty() ? "undefined value" : v.undefined_hint());
}
jvalue filter_int(const jvalue& v, const call_args& a) {
  refuse_undefined_number(v);
  return to_int(v, a.get(0, "default", jvalue(0)));
}
jvalue filter_float(const jvalue& v, const call_args& a) {
  refuse_undefined_number(v);
  return to_float(v, a.get(0, "default", jvalue(0.0)));
}
jvalue filter_abs(const jvalue& v, const call_args&) {
  if (v.is_float()) return jvalue(std::fabs(v.as_float()));
  if (v.as_int() == INT64_MIN)
    throw template_error("integer overflow (results must fit in 64 bits)");
  return jvalue(v.as_int() < 0 ? -v.as_int() : v.as_int());
}
jvalue filter_round(const jvalue& v, const call_args& a) {
  int64_t prec = a.get(0, "precision", jvalue(0)).as_int();
  std::string method = a.get(1, "method", jvalue("common")).to_str();
  double scale = std::pow(10.0, static_cast<double>(prec));
  double x = v.as_float() * scale;
  // Python's round(int, n) is the int itself; floor and ceil go through math and give floats.
  if (method != "ceil" && method != "floor" && (v.is_int() || v.is_bool())) {
    if (prec >= 0) return jvalue(v.as_int());
    return jvalue(
        static_cast<int64_t>(std::nearbyint(v.as_float() * scale) / scale));  // half to even
  }
  double r = method == "ceil"    ? std::ceil(x)
             : method == "floor" ? std::floor(x)
                                 : std::nearbyint(x);
  // math.ceil/floor return ints in Python, so their results are never -0.0 (round's can be).
  if (method == "ceil" || method == "floor") r += 0.0;
  return jvalue(r / scale);
}
jvalue filter_filesizeformat(const jvalue& v, const call_args& a) {
  double bytes;
  if (v.is_string()) {
    char* end = nullptr;
    const std::string t = python_strip(v.str(), true, true);
    bytes = std::strtod(t.c_str(), &end);
    if (t.empty() || *end != '\0')
      throw template_error("could not convert string to float: " + v.repr());
  } else {
    bytes = v.as_float();
  }
  return jvalue(file_size(bytes, a.get(0, "binary", jvalue(false)).truthy()));
}

// Sequence filters.
jvalue filter_list(const jvalue& v, const call_args&) { return jvalue::list(iterate(v)); }
jvalue filter_join(const jvalue& v, const call_args& a) {
  std::string sep = a.get(0, "d", jvalue("")).to_str();
  jvalue attribute = a.get(1, "attribute", jvalue());
  std::string out;
  bool first = true;
  for (const auto& x : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += (attribute.is_none() ? x : attr_path(x, attribute)).to_str();
  }
  return jvalue(out);
}
jvalue filter_reverse(const jvalue& v, const call_args&) {
  if (v.is_string()) {
    auto cps = code_points(v.str());
    std::string out;
    for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
    return jvalue(out);
  }
  auto items = iterate(v);
  std::reverse(items.begin(), items.end());
  jvalue r = jvalue::list(std::move(items));
  r.lst().lazy = true;  // a reverse iterator in jinja2: no len(), no JSON form
  return r;
}
jvalue filter_sort(const jvalue& v, const call_args& a) {
  bool rev = a.get(0, "reverse", jvalue(false)).truthy();
  bool cs = a.get(1, "case_sensitive", jvalue(false)).truthy();
  jvalue attribute = a.get(2, "attribute", jvalue());
  auto items = iterate(v);
  std::stable_sort(items.begin(), items.end(), [&](const jvalue& p, const jvalue& q) {
    jvalue x = attribute.is_none() ? p : attr_path(p, attribute);
    jvalue y = attribute.is_none() ? q : attr_path(q, attribute);
    // jinja2 sorts by [key] lists, which compare equal items equal before trying `<`: items that
    // both lack the attribute (Undefined == Undefined) keep their order.
    if (!attribute.is_none() && x.is_undefined() && y.is_undefined()) return false;
    int c = compare(sort_key(x, cs), sort_key(y, cs));
    return rev ? c > 0 : c < 0;
  });
  return jvalue::list(std::move(items));
}
jvalue filter_unique(const jvalue& v, const call_args& a) {
  bool cs = a.get(0, "case_sensitive", jvalue(false)).truthy();
  jvalue attribute = a.get(1, "attribute", jvalue());
  std::vector<jvalue> out, seen;
  for (const auto& x : iterate(v)) {
    jvalue key = sort_key(attribute.is_none() ? x : attr_path(x, attribute), cs);
    bool dup = false;
    for (const auto& s : seen) dup = dup || equals(s, key);
    if (!dup) {
      seen.push_back(key);
      out.push_back(x);
    }
  }
  return jvalue::list(std::move(out));
}
template <bool Max>
jvalue filter_min_max(const jvalue& v, const call_args& a) {
  bool cs = a.get(0, "case_sensitive", jvalue(false)).truthy();
  jvalue attribute = a.get(1, "attribute", jvalue());
  auto items = iterate(v);
  if (items.empty()) return jvalue::undefined("No aggregated item, sequence was empty.");
  jvalue best = items[0];
  for (size_t i = 1; i < items.size(); ++i) {
    jvalue x = sort_key(attribute.is_none() ? items[i] : attr_path(items[i], attribute), cs);
    jvalue y = sort_key(attribute.is_none() ? best : attr_path(best, attribute), cs);
    int c = compare(x, y);
    if (Max ? c > 0 : c < 0) best = items[i];
  }
  return best;
}
jvalue filter_sum(const jvalue& v, const call_args& a) {
  jvalue attribute = a.get(0, "attribute", jvalue());
  jvalue total = a.get(1, "start", jvalue(0));
  for (const auto& x : iterate(v)) {
    jvalue y = attribute.is_none() ? x : attr_path(x, attribute);
    if (total.is_float() || y.is_float())
      total = jvalue(total.as_float() + y.as_float());
    else {
      int64_t r = 0;
      if (__builtin_add_overflow(total.as_int(), y.as_int(), &r))
        throw template_error("integer overflow (results must fit in 64 bits)");
      total = jvalue(r);
    }
  }
  return total;
}
jvalue filter_batch(const jvalue& v, const call_args& a) {
  int64_t n = a.get(0, "linecount").as_int();
  jvalue fill = a.get(1, "fill_with", jvalue());
  if (n <= 0) throw template_error("batch size must be positive");
  std::vector<jvalue> out, cur;
  for (const auto& x : iterate(v)) {
    cur.push_back(x);
    if (static_cast<int64_t>(cur.size()) == n) {
      out.push_back(jvalue::list(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (!fill.is_none())
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(fill);
    out.push_back(jvalue::list(std::move(cur)));
  }
  return jvalue::list(std::move(out));
}
// jinja2's do_groupby: sorted by the key, (grouper, list) per key.
jvalue filter_groupby(const jvalue& v, const call_args& a) {
  const jvalue attribute = a.get(0, "attribute");
  const jvalue def = a.get(1, "default", jvalue());
  const bool case_sensitive = a.get(2, "case_sensitive", jvalue(false)).truthy();
  std::vector<std::pair<jvalue, jvalue>> keyed;  // (key, item)
  for (const auto& x : iterate(v)) {
    jvalue k = attr_path(x, attribute);
    if (k.is_undefined() && !def.is_none()) k = def;
    keyed.emplace_back(k, x);
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return compare(sort_key(x.first, case_sensitive), sort_key(y.first, case_sensitive)) < 0;
  });
  std::vector<jvalue> out;
  for (size_t i = 0; i < keyed.size();) {
    size_t j = i;
    std::vector<jvalue> members;
    const jvalue key = sort_key(keyed[i].first, case_sensitive);
    while (j < keyed.size() && equals(sort_key(keyed[j].first, case_sensitive), key))
      members.push_back(keyed[j++].second);
    jvalue g = jvalue::list({keyed[i].first, jvalue::list(std::move(members))}, true);
    g.lst().group = true;
    out.push_back(std::move(g));
    i = j;
  }
  return jvalue::list(std::move(out));
}
// jinja2's do_slice: `slices` columns, the first length % slices one longer.
jvalue filter_slice(const jvalue& v, const call_args& a) {
  const int64_t slices = a.get(0, "slices").as_int();
  if (slices <= 0) throw template_error("slice count must be positive");
  if (slices > k_max_width)
    throw template_error("slice count " + std::to_string(slices) + " is too large");
  jvalue fill = a.get(1, "fill_with", jvalue());
  const std::vector<jvalue> seq = iterate(v);
  const auto length = static_cast<int64_t>(seq.size());
  const int64_t per = length / slices, extra = length % slices;
  std::vector<jvalue> out;
  int64_t offset = 0;
  for (int64_t k = 0; k < slices; ++k) {
    const int64_t start = offset + k * per;
    if (k < extra) ++offset;
    const int64_t end = offset + (k + 1) * per;
    std::vector<jvalue> part(seq.begin() + start, seq.begin() + end);
    if (!fill.is_none() && k >= extra) part.push_back(fill);
    out.push_back(jvalue::list(std::move(part)));
  }
  jvalue res = jvalue::list(std::move(out));
  res.lst().lazy = true;
  return res;
}
jvalue filter_map(const jvalue& v, const call_args& a) {
  std::vector<jvalue> out;
  if (!v.truthy()) return jvalue::list();
  jvalue attribute = a.get(SIZE_MAX, "attribute", jvalue());
  if (!attribute.is_none()) {
    jvalue def = a.get(SIZE_MAX, "default", jvalue::undefined(""));
    for (const auto& x : iterate(v)) {
      jvalue y = attr_path(x, attribute);
      out.push_back(y.is_undefined() && !def.is_undefined() ? def : y);
    }
  } else {
    std::string filter = a.get(0, "\x01").to_str();
    call_args rest = shift_args(a, 1);
    for (const auto& x : iterate(v)) out.push_back(apply_filter(filter, x, rest));
  }
  jvalue res = jvalue::list(std::move(out));
  res.lst().lazy = true;
  return res;
}
template <bool ByAttr, bool KeepWhen>
jvalue filter_select(const jvalue& v, const call_args& a) {
  return select_like(v, a, ByAttr, KeepWhen);
}

// Mapping filters.
jvalue filter_items(const jvalue& v, const call_args&) {
  if (v.is_undefined()) return jvalue::list();
  if (!v.is_dict()) throw template_error("items filter expects a mapping");
  std::vector<jvalue> out;
  for (const auto& [k, x] : v.dct().items) out.push_back(jvalue::list({key_value(k), x}, true));
  return jvalue::list(std::move(out));
}
jvalue filter_dictsort(const jvalue& v, const call_args& a) {
  bool cs = a.get(0, "case_sensitive", jvalue(false)).truthy();
  std::string by = a.get(1, "by", jvalue("key")).to_str();
  bool rev = a.get(2, "reverse", jvalue(false)).truthy();
  if (!v.is_dict()) throw template_error("dictsort expects a mapping");
  std::vector<jvalue> out;
  for (const auto& [k, x] : v.dct().items) out.push_back(jvalue::list({key_value(k), x}, true));
  size_t idx = by == "value" ? 1 : 0;
  std::stable_sort(out.begin(), out.end(), [&](const jvalue& p, const jvalue& q) {
    int c = compare(sort_key(p.lst().items[idx], cs), sort_key(q.lst().items[idx], cs));
    return rev ? c > 0 : c < 0;
  });
  return jvalue::list(std::move(out));
}
jvalue filter_attr(const jvalue& v, const call_args& a) {
  return get_attr(v, a.get(0, "name").to_str());
}
jvalue filter_urlencode(const jvalue& v, const call_args&) {
  if (v.is_string() || !(v.is_list() || v.is_dict())) return jvalue(url_quote(v.to_str(), false));
  std::string out;
  auto pair = [&](const jvalue& k, const jvalue& x) {
    if (!out.empty()) out += '&';
    out += url_quote(k.to_str(), true) + "=" + url_quote(x.to_str(), true);
  };
  if (v.is_dict()) {
    for (const auto& [k, x] : v.dct().items) pair(jvalue(k), x);
  } else {
    for (const auto& item : iterate(v)) {
      const auto kv = iterate(item);
      if (kv.size() != 2)
        throw template_error("urlencode: each item must be a (key, value) pair, got " +
                             std::to_string(kv.size()) + " values");
      pair(kv[0], kv[1]);
    }
  }
  return jvalue(out);
}
jvalue filter_xmlattr(const jvalue& v, const call_args& a) {
  if (!v.is_dict()) throw template_error("'" + v.type_name() + "' object has no attribute 'items'");
  std::string out;
  for (const auto& [k, x] : v.dct().items) {
    if (x.is_none() || x.is_undefined()) continue;
    if (k.find_first_of(" \t\n\r\f\v/>=") != std::string::npos)
      throw template_error("Invalid character in attribute name: " + jvalue(k).repr());
    if (!out.empty()) out += ' ';
    out += html_escape(k) + "=\"" + html_escape(x.to_str()) + "\"";
  }
  if (!out.empty() && a.get(0, "autospace", jvalue(true)).truthy()) out.insert(0, " ");
  return jvalue(out);
}

constexpr named<filter_fn> k_filters[] = {
    {"abs", filter_abs},
    {"attr", filter_attr},
    {"batch", filter_batch},
    {"capitalize", filter_capitalize},
    {"center", filter_center},
    {"count", filter_length},
    {"d", filter_default},
    {"default", filter_default},
    {"dictsort", filter_dictsort},
    {"e", filter_escape},
    {"escape", filter_escape},
    {"filesizeformat", filter_filesizeformat},
    {"first", filter_first},
    {"float", filter_float},
    {"forceescape", filter_escape},
    {"format", filter_format},
    {"groupby", filter_groupby},
    {"indent", filter_indent},
    {"int", filter_int},
    {"items", filter_items},
    {"join", filter_join},
    {"last", filter_last},
    {"length", filter_length},
    {"list", filter_list},
    {"lower", filter_lower},
    {"map", filter_map},
    {"max", filter_min_max<true>},
    {"min", filter_min_max<false>},
    {"pprint", filter_pprint},
    {"reject", filter_select<false, false>},
    {"rejectattr", filter_select<true, false>},
    {"replace", filter_replace},
    {"reverse", filter_reverse},
    {"round", filter_round},
    {"safe", filter_safe},
    {"select", filter_select<false, true>},
    {"selectattr", filter_select<true, true>},
    {"slice", filter_slice},
    {"sort", filter_sort},
    {"string", filter_string},
    {"striptags", filter_striptags},
    {"sum", filter_sum},
    {"title", filter_title},
    {"tojson", filter_tojson},
    {"trim", filter_trim},
    {"truncate", filter_truncate},
    {"unique", filter_unique},
    {"upper", filter_upper},
    {"urlencode", filter_urlencode},
    {"wordcount", filter_wordcount},
    {"xmlattr", filter_xmlattr},
};
static_assert(sorted_by_name(k_filters), "k_filters must stay sorted by name");

}  // namespace

jvalue apply_filter(std::string_view name, const jvalue& v, const call_args& a) {
  const named<filter_fn>* f = find_named(k_filters, name);
  if (f == nullptr) throw template_error("No filter named '" + std::string(name) + "'.");
  return f->fn(v, a);
}

}  // namespace coserve::jinja
