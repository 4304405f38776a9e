// Python's two string-formatting languages as chat templates reach them: `fmt % args` (and the
// `format` filter) and str.format() with the format-spec mini-language, for the values a template
// holds (str, int, bool, float, None, lists, dicts). Python 3.11's rules and error messages.
// Over 500 lines: one concept, the two languages sharing one spec, padding and number formatting
// (format_int / format_float serve both); apart they would each need all of it.
#include <utf8proc.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/text/jinja/builtins.hpp"

namespace coserve::jinja {

namespace {

// A width or precision as written (a negative * width keeps its sign), refused past k_max_width.
int64_t bounded(int64_t n, const char* what) {
  width_arg(n, what);
  return n;
}

std::string printf_string(const std::string& f, double x) {
  std::string out;
  append_printf(out, f, x);
  return out;
}

// Python's ascii(): repr() with every non-ASCII code point escaped.
std::string ascii_of(const std::string& repr) {
  std::string out;
  for (size_t i = 0; i < repr.size();) {
    utf8proc_int32_t cp = -1;
    const utf8proc_ssize_t n =
        utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(repr.data() + i),
                         static_cast<utf8proc_ssize_t>(repr.size() - i), &cp);
    if (n <= 0 || cp < 0x80) {
      out += repr[i++];
      continue;
    }
    char buf[16];
    std::snprintf(buf, sizeof buf,
                  cp <= 0xFF     ? "\\x%02x"
                  : cp <= 0xFFFF ? "\\u%04x"
                                 : "\\U%08x",
                  static_cast<unsigned>(cp));
    out += buf;
    i += static_cast<size_t>(n);
  }
  return out;
}

// `fill` repeated n times (fill is one code point).
std::string repeat(const std::string& fill, size_t n) {
  std::string out;
  out.reserve(fill.size() * n);
  for (size_t i = 0; i < n; ++i) out += fill;
  return out;
}

// Pads `body` (after `sign_prefix`, which '=' keeps in front) to `width` code points.
std::string pad(const std::string& sign_prefix, const std::string& body, int64_t width, char align,
                const std::string& fill) {
  const size_t len = code_point_count(sign_prefix) + code_point_count(body);
  if (width <= 0 || static_cast<size_t>(width) <= len) return sign_prefix + body;
  const size_t n = static_cast<size_t>(width) - len;
  switch (align) {
    case '<':
      return sign_prefix + body + repeat(fill, n);
    case '^':
      return repeat(fill, n / 2) + sign_prefix + body + repeat(fill, n - n / 2);
    case '=':
      return sign_prefix + repeat(fill, n) + body;
    default:
      return repeat(fill, n) + sign_prefix + body;
  }
}

// Inserts `sep` every `group` digits from the right of the leading digit run of `text` (hex
// digits too for hex), leaving what follows it (a fraction, an exponent) as it is.
std::string group_digits(const std::string& text, char sep, int group, bool hex = false) {
  size_t end = 0;
  while (end < text.size() && (hex ? std::isxdigit(static_cast<unsigned char>(text[end])) != 0
                                   : (text[end] >= '0' && text[end] <= '9')))
    ++end;
  std::string out;
  for (size_t i = 0; i < end; ++i) {
    if (i > 0 && (end - i) % static_cast<size_t>(group) == 0) out += sep;
    out += text[i];
  }
  return out + text.substr(end);
}

// Python's format(x, '.p') (no type): 'g' that switches to an exponent from 10^(p-1) on, not
// 10^p, and keeps a ".0" on whole numbers (CPython's Py_DTSF_ADD_DOT_0). x >= 0 and finite.
std::string general_dot0(double x, int64_t p, bool alt) {
  if (p == 0) p = 1;
  const std::string e = printf_string((alt ? "%#." : "%.") + std::to_string(p - 1) + "e", x);
  const size_t epos = e.find('e');
  const int exp10 = std::atoi(e.c_str() + epos + 1);
  auto strip_zeros = [&](std::string t) {
    if (alt || t.find('.') == std::string::npos) return t;
    while (!t.empty() && t.back() == '0') t.pop_back();
    if (!t.empty() && t.back() == '.') t.pop_back();
    return t;
  };
  if (exp10 < -4 || exp10 >= p - 1) {
    std::string mant = strip_zeros(e.substr(0, epos));
    char buf[16];
    std::snprintf(buf, sizeof buf, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    return mant + buf;
  }
  std::string f =
      strip_zeros(printf_string((alt ? "%#." : "%.") + std::to_string(p - 1 - exp10) + "f", x));
  if (f.find('.') == std::string::npos) f += alt ? "." : ".0";
  return f;
}

struct spec_t {
  std::string fill = " ";
  char align = 0;  // 0: the type's default
  char sign = '-';
  bool sign_given = false, z = false, alt = false, zero = false;
  int64_t width = -1, precision = -1;
  char grouping = 0;
  char type = 0;
};

spec_t parse_spec(std::string_view s) {
  spec_t p;
  size_t i = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '=' || c == '^'; };
  // [[fill]align]: the fill is one code point.
  if (!s.empty()) {
    size_t first = 1;
    while (first < s.size() && (static_cast<unsigned char>(s[first]) & 0xC0) == 0x80) ++first;
    if (first < s.size() && is_align(s[first])) {
      p.fill = std::string(s.substr(0, first));
      p.align = s[first];
      i = first + 1;
    } else if (is_align(s[0])) {
      p.align = s[0];
      i = 1;
    }
  }
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' '))
    p.sign = s[i++], p.sign_given = true;
  if (i < s.size() && s[i] == 'z') p.z = true, ++i;
  if (i < s.size() && s[i] == '#') p.alt = true, ++i;
  if (i < s.size() && s[i] == '0') p.zero = true, ++i;
  auto number = [&](int64_t& out) {
    if (i >= s.size() || s[i] < '0' || s[i] > '9') return false;
    out = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9')
      out = bounded(out * 10 + (s[i++] - '0'), "format width");
    return true;
  };
  number(p.width);
  if (i < s.size() && (s[i] == ',' || s[i] == '_')) p.grouping = s[i++];
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (!number(p.precision)) throw template_error("Format specifier missing precision");
  }
  if (i < s.size()) p.type = s[i++];
  if (i < s.size()) throw template_error("Invalid format specifier");
  return p;
}

std::string format_float(double x, const spec_t& p, char type) {
  const bool upper = type == 'E' || type == 'F' || type == 'G';
  std::string body;
  const bool neg = std::signbit(x) && !(p.z && x == 0.0) && !std::isnan(x);
  const double a = std::fabs(x);
  if (std::isinf(a) || std::isnan(a)) {
    body = std::isnan(a) ? (upper ? "NAN" : "nan") : (upper ? "INF" : "inf");
    if (type == '%') body += '%';
  } else {
    int64_t prec = p.precision;
    char c = static_cast<char>(std::tolower(static_cast<unsigned char>(type)));
    double v = a;
    if (type == '%') v = a * 100.0, c = 'f';
    if (type == 'n') c = 'g';
    if (type == 0) {
      if (prec < 0) {
        body = jvalue(a).repr();
      } else {
        body = general_dot0(v, prec, p.alt);
      }
    } else {
      if (prec < 0) prec = 6;
      std::string f = "%";
      if (p.alt) f += '#';
      f += "." + std::to_string(prec);
      f += c;
      body = printf_string(f, v);
    }
    if (upper)
      std::transform(body.begin(), body.end(), body.begin(),
                     [](unsigned char ch) { return std::toupper(ch); });
    if (p.grouping) body = group_digits(body, p.grouping, 3);
    if (type == '%') body += '%';
  }
  const std::string sign = neg ? "-" : p.sign == '+' ? "+" : p.sign == ' ' ? " " : "";
  std::string fill = p.fill;
  char align = p.align;
  if (p.zero && align == 0) fill = "0", align = '=';
  return pad(sign, body, p.width, align == 0 ? '>' : align, fill);
}

std::string format_int(const jvalue& v, const spec_t& p) {
  const int64_t n = v.as_int();
  char type = p.type;
  if (type == 'e' || type == 'E' || type == 'f' || type == 'F' || type == 'g' || type == 'G' ||
      type == '%')
    return format_float(static_cast<double>(n), p, type);
  if (p.precision >= 0) throw template_error("Precision not allowed in integer format specifier");
  if (type == 'c') {
    if (p.sign != '-') throw template_error("Sign not allowed with integer format specifier 'c'");
    if (n < 0 || n > 0x10FFFF) throw template_error("%c arg not in range(0x110000)");
    std::string ch;
    append_cp(ch, static_cast<int32_t>(n));
    return pad("", ch, p.width, p.align == 0 ? '<' : p.align, p.fill);
  }
  if (type != 0 && type != 'd' && type != 'n' && type != 'b' && type != 'o' && type != 'x' &&
      type != 'X')
    throw template_error(std::string("Unknown format code '") + type +
                         "' for object of type 'int'");
  const uint64_t mag = n < 0 ? uint64_t(0) - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
  std::string digits, prefix;
  if (type == 'b') {
    for (uint64_t m = mag; m; m >>= 1) digits.insert(digits.begin(), char('0' + (m & 1)));
    if (digits.empty()) digits = "0";
    if (p.alt) prefix = "0b";
  } else if (type == 'o' || type == 'x' || type == 'X') {
    char buf[32];
    std::snprintf(buf, sizeof buf,
                  type == 'o'   ? "%llo"
                  : type == 'x' ? "%llx"
                                : "%llX",
                  static_cast<unsigned long long>(mag));
    digits = buf;
    if (p.alt) prefix = type == 'o' ? "0o" : type == 'x' ? "0x" : "0X";
  } else {
    digits = std::to_string(mag);
  }
  if (p.grouping) {
    if (p.grouping == ',' && (type == 'b' || type == 'o' || type == 'x' || type == 'X'))
      throw template_error(std::string("Cannot specify ',' with '") + type + "'.");
    digits = group_digits(digits, p.grouping, type == 0 || type == 'd' || type == 'n' ? 3 : 4,
                          type == 'x' || type == 'X');
  }
  const std::string sign = n < 0 ? "-" : p.sign == '+' ? "+" : p.sign == ' ' ? " " : "";
  std::string fill = p.fill;
  char align = p.align;
  if (p.zero && align == 0) fill = "0", align = '=';
  return pad(sign + prefix, digits, p.width, align == 0 ? '>' : align, fill);
}

// format(value, spec) for a template's value.
std::string format_value(const jvalue& v, std::string_view spec_text) {
  if (spec_text.empty()) return v.to_str();
  if (v.is_undefined())
    throw template_error("unsupported format string passed to Undefined.__format__");
  const spec_t p = parse_spec(spec_text);
  if (v.is_string()) {
    if (p.type != 0 && p.type != 's')
      throw template_error(std::string("Unknown format code '") + p.type +
                           "' for object of type 'str'");
    if (p.sign_given) throw template_error("Sign not allowed in string format specifier");
    if (p.grouping)
      throw template_error(std::string("Cannot specify '") + p.grouping + "' with 's'.");
    if (p.alt) throw template_error("Alternate form (#) not allowed in string format specifier");
    if (p.align == '=')
      throw template_error("'=' alignment not allowed in string format specifier");
    std::string s = v.str();
    if (p.precision >= 0) {
      const auto off = code_point_offsets(s);
      if (static_cast<size_t>(p.precision) + 1 < off.size())
        s.resize(off[static_cast<size_t>(p.precision)]);
    }
    std::string fill = p.fill;
    if (p.zero && p.align == 0) fill = "0";
    return pad("", s, p.width, p.align == 0 ? '<' : p.align, fill);
  }
  if (v.is_int() || v.is_bool()) return format_int(v, p);
  if (v.is_float()) {
    const char t = p.type;
    if (t != 0 && t != 'e' && t != 'E' && t != 'f' && t != 'F' && t != 'g' && t != 'G' &&
        t != 'n' && t != '%')
      throw template_error(std::string("Unknown format code '") + t +
                           "' for object of type 'float'");
    return format_float(v.as_float(), p, t);
  }
  const std::string type = v.is_none()   ? "NoneType"
                           : v.is_list() ? (v.lst().tuple ? "tuple" : "list")
                           : v.is_dict() ? "dict"
                                         : "object";
  throw template_error("unsupported format string passed to " + type + ".__format__");
}

// ---- str.format() ---------------------------------------------------------------------------

// A replacement field `{name!conversion:spec}` of str.format(), split into its parts.
struct format_field {
  std::string name;
  char conversion = 0;  // 0, or the letter after '!'
  std::string spec;
};

// The '}' that closes the field opening at fmt[open] (the spec may hold nested {fields}).
size_t field_end(const std::string& fmt, size_t open) {
  size_t j = open + 1;
  int nest = 1;
  for (; j < fmt.size(); ++j) {
    if (fmt[j] == '{')
      ++nest;
    else if (fmt[j] == '}' && --nest == 0)
      break;
  }
  if (j >= fmt.size())
    throw template_error(nest > 1 ? "expected '}' before end of string"
                                  : "Single '{' encountered in format string");
  return j;
}

// field_name [! conversion] [: spec]; the name ends at the first '!' or ':' outside brackets.
format_field split_field(const std::string& field) {
  size_t k = 0;
  for (bool in_bracket = false; k < field.size(); ++k) {
    if (field[k] == '[')
      in_bracket = true;
    else if (field[k] == ']')
      in_bracket = false;
    else if (!in_bracket && (field[k] == '!' || field[k] == ':'))
      break;
  }
  format_field f;
  f.name = field.substr(0, k);
  if (k < field.size() && field[k] == '!') {
    if (k + 1 >= field.size())
      throw template_error("end of string while looking for conversion specifier");
    f.conversion = field[k + 1];
    k += 2;
    if (k < field.size() && field[k] != ':')
      throw template_error("expected ':' after conversion specifier");
  }
  if (k < field.size() && field[k] == ':') f.spec = field.substr(k + 1);
  return f;
}

bool all_digits(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
}

// The positional arguments of one format string's fields: numbered automatically ({}) or by hand
// ({0}), never both.
class field_numbering {
 public:
  // The index that field `first` ("" or digits) takes from `count` positional arguments.
  size_t index_of(const std::string& first, size_t count) {
    size_t idx;
    if (first.empty()) {
      if (used_manual_)
        throw template_error(
            "cannot switch from manual field specification to automatic field numbering");
      used_auto_ = true;
      idx = next_++;
    } else {
      if (used_auto_)
        throw template_error(
            "cannot switch from automatic field numbering to manual field specification");
      used_manual_ = true;
      idx = first.size() > 9 ? SIZE_MAX : std::stoul(first);
    }
    if (idx >= count)
      throw template_error("Replacement index " + first +
                           (first.empty() ? std::to_string(idx) : "") +
                           " out of range for positional args tuple");
    return idx;
  }

 private:
  size_t next_ = 0;
  bool used_auto_ = false, used_manual_ = false;
};

// The argument a field names first: "" (the next positional), digits (that positional) or a
// keyword.
jvalue field_argument(const std::string& first, const call_args& a, field_numbering& numbering) {
  if (first.empty() || all_digits(first)) return a.pos[numbering.index_of(first, a.pos.size())];
  if (!a.has(SIZE_MAX, first)) throw template_error("'" + first + "'");
  return a.get(SIZE_MAX, first);
}

// The .attr and [key] accessors of a field name from name[e] on, applied to v in order.
jvalue apply_accessors(jvalue v, const std::string& name, size_t e) {
  while (e < name.size()) {
    if (name[e] == '.') {
      size_t f = e + 1;
      while (f < name.size() && name[f] != '.' && name[f] != '[') ++f;
      const std::string attr = name.substr(e + 1, f - e - 1);
      if (attr.empty()) throw template_error("Empty attribute in format string");
      v = get_attr(v, attr);
      e = f;
    } else {
      const size_t close = name.find(']', e);
      if (close == std::string::npos) throw template_error("Missing ']' in format string");
      const std::string key = name.substr(e + 1, close - e - 1);
      const bool digits = !key.empty() && all_digits(key);
      if (digits && key.size() > 18) throw template_error("index " + key + " out of range");
      v = get_item(v, digits ? jvalue(static_cast<int64_t>(std::stoll(key))) : jvalue(key));
      e = close + 1;
      if (e < name.size() && name[e] != '.' && name[e] != '[')
        throw template_error("Only '.' or '[' may follow ']' in format field specifier");
    }
  }
  return v;
}

// A field's !r, !s or !a (none: conversion 0).
jvalue convert_field(jvalue v, char conversion) {
  if (conversion == 'r') return jvalue(v.repr());
  if (conversion == 's') return jvalue(v.to_str());
  if (conversion == 'a') return jvalue(ascii_of(v.repr()));
  if (conversion != 0)
    throw template_error(std::string("Unknown conversion specifier ") + conversion);
  return v;
}

// ---- fmt % args -----------------------------------------------------------------------------

// The arguments of `fmt % args`: a tuple's items taken in order, or a mapping's values by %(key).
class percent_args {
 public:
  explicit percent_args(const jvalue& args)
      : args_(args),
        list_(args.is_list() && args.lst().tuple ? args.lst().items : std::vector<jvalue>{args}) {}

  // The next positional argument; after a %(key) Python has no positional arguments left.
  const jvalue& next() {
    if (next_ >= list_.size() || used_mapping_)
      throw template_error("not enough arguments for format string");
    return list_[next_++];
  }

  // %(key) at fmt[j] (j just after the '%'): the mapping's value, and j moved past the ')'; none
  // when fmt[j] is not '('.
  std::optional<jvalue> keyed(const std::string& fmt, size_t& j) {
    if (j >= fmt.size() || fmt[j] != '(') return std::nullopt;
    int depth = 1;
    size_t k = j + 1;
    for (; k < fmt.size() && depth > 0; ++k) depth += fmt[k] == '(' ? 1 : fmt[k] == ')' ? -1 : 0;
    if (depth > 0) throw template_error("incomplete format key");
    if (!args_.is_dict()) throw template_error("format requires a mapping");
    jvalue v = get_item(args_, jvalue(fmt.substr(j + 1, k - j - 2)));
    if (v.is_undefined()) throw template_error("'" + fmt.substr(j + 1, k - j - 2) + "'");
    used_mapping_ = true;
    j = k;
    return v;
  }

  // Python: a tuple's unused items are an error, and so is an unused single argument unless it is
  // a mapping, a list or jinja2's Undefined (all pass PyMapping_Check, so '%' treats them as a
  // mapping).
  void check_all_converted() const {
    if (!used_mapping_ && next_ < list_.size() && !args_.is_dict() && !args_.is_undefined() &&
        !(args_.is_list() && !args_.lst().tuple))
      throw template_error("not all arguments converted during string formatting");
  }

 private:
  const jvalue& args_;
  std::vector<jvalue> list_;
  size_t next_ = 0;
  bool used_mapping_ = false;
};

// One conversion of `fmt % args` as written after '%' (and its %(key)).
struct percent_spec {
  bool left = false, plus = false, space = false, alt = false, zero = false;
  int64_t width = -1, precision = -1;
  char conv = 0;
};

// Reads flags, width, precision (either may be * from the arguments), length modifiers and the
// conversion character from fmt[j], leaving j on the conversion character.
percent_spec read_percent_spec(const std::string& fmt, size_t& j, percent_args& args) {
  percent_spec p;
  for (; j < fmt.size(); ++j) {
    const char f = fmt[j];
    if (f == '-')
      p.left = true;
    else if (f == '+')
      p.plus = true;
    else if (f == ' ')
      p.space = true;
    else if (f == '#')
      p.alt = true;
    else if (f == '0')
      p.zero = true;
    else
      break;
  }
  auto number = [&](int64_t& n, const char* what) {
    if (j < fmt.size() && fmt[j] == '*') {
      ++j;
      const jvalue& w = args.next();
      if (!w.is_int() && !w.is_bool()) throw template_error("* wants int");
      n = bounded(w.as_int(), what);
      return;
    }
    if (j >= fmt.size() || fmt[j] < '0' || fmt[j] > '9') return;
    n = 0;
    while (j < fmt.size() && fmt[j] >= '0' && fmt[j] <= '9')
      n = bounded(n * 10 + (fmt[j++] - '0'), what);
  };
  number(p.width, "format width");
  if (p.width < -1) p.left = true, p.width = -p.width;  // a negative * width left-justifies
  if (j < fmt.size() && fmt[j] == '.') {
    ++j;
    p.precision = 0;
    number(p.precision, "format precision");
    if (p.precision < 0) p.precision = 0;
  }
  while (j < fmt.size() && (fmt[j] == 'h' || fmt[j] == 'l' || fmt[j] == 'L'))
    ++j;  // length modifiers: ignored
  if (j >= fmt.size()) throw template_error("incomplete format");
  p.conv = fmt[j];
  return p;
}

// The format-spec fields a %-conversion shares with format(): sign, '#', width and alignment.
spec_t number_spec(const percent_spec& p) {
  spec_t s;
  s.sign = p.plus ? '+' : p.space ? ' ' : '-';
  s.alt = p.alt;
  s.width = p.width;
  s.align = p.left ? '<' : '>';
  return s;
}

// %s, %r, %a: str(), repr() or ascii(), cut to `precision` code points.
std::string percent_text(const percent_spec& p, const jvalue& a) {
  std::string text = p.conv == 's' ? a.to_str() : p.conv == 'r' ? a.repr() : ascii_of(a.repr());
  if (p.precision >= 0) {
    const auto off = code_point_offsets(text);
    if (static_cast<size_t>(p.precision) + 1 < off.size())
      text.resize(off[static_cast<size_t>(p.precision)]);
  }
  return pad("", text, p.width, p.left ? '<' : '>', " ");
}

// %c: a one-character string, or the character of an int code point.
std::string percent_char(const percent_spec& p, const jvalue& a) {
  std::string text;
  if (a.is_string()) {
    if (code_point_count(a.str()) != 1) throw template_error("%c requires int or char");
    text = a.str();
  } else if (a.is_int() || a.is_bool()) {
    spec_t c;
    c.type = 'c';
    text = format_int(a, c);
  } else {
    throw template_error("%c requires int or char");
  }
  return pad("", text, p.width, p.left ? '<' : '>', " ");
}

// %d %i %u %o %x %X: an integer (a float truncated for d/i/u), precision as a minimum digit count.
std::string percent_integer(const percent_spec& p, const jvalue& a) {
  const char conv = p.conv;
  const bool integral = conv == 'o' || conv == 'x' || conv == 'X';
  if (a.is_string() || a.is_none() || a.is_list() || a.is_dict() || a.is_undefined() ||
      (integral && a.is_float()))
    throw template_error(std::string("%") + conv + " format: " +
                         (integral ? "an integer" : "a real number") + " is required, not " +
                         (a.is_string()  ? "str"
                          : a.is_none()  ? "NoneType"
                          : a.is_float() ? "float"
                          : a.is_list()  ? "list"
                                         : "dict"));
  if (a.is_float() && !std::isfinite(a.as_float()))
    throw template_error(std::isnan(a.as_float()) ? "cannot convert float NaN to integer"
                                                  : "cannot convert float infinity to integer");
  spec_t q = number_spec(p);
  q.type = conv == 'o' || conv == 'x' || conv == 'X' ? conv : 'd';
  q.width = -1;
  std::string body = format_int(jvalue(a.as_int()), q);  // sign and 0o/0x prefix included
  // Precision: at least that many digits.
  std::string sign_prefix;
  size_t digits_at = 0;
  while (digits_at < body.size() &&
         (body[digits_at] == '-' || body[digits_at] == '+' || body[digits_at] == ' '))
    ++digits_at;
  if (p.alt && q.type != 'd') digits_at += 2;
  sign_prefix = body.substr(0, digits_at);
  std::string digits = body.substr(digits_at);
  if (p.precision > 0 && static_cast<int64_t>(digits.size()) < p.precision)
    digits.insert(0, static_cast<size_t>(p.precision) - digits.size(), '0');
  return pad(sign_prefix, digits, p.width,
             p.left   ? '<'
             : p.zero ? '='
                      : '>',
             p.zero && !p.left ? "0" : " ");
}

// %e %E %f %F %g %G: a number as a float, precision 6 unless given.
std::string percent_float(const percent_spec& p, const jvalue& a) {
  if (!a.is_number())
    throw template_error(std::string("must be real number, not ") + (a.is_string() ? "str"
                                                                     : a.is_none() ? "NoneType"
                                                                     : a.is_list() ? "list"
                                                                                   : "dict"));
  spec_t q = number_spec(p);
  q.type = p.conv;
  q.precision = p.precision < 0 ? 6 : p.precision;
  q.width = p.width;
  if (p.zero && !p.left) q.fill = "0", q.align = '=';
  return format_float(a.as_float(), q, p.conv);
}

// One conversion (not %%) of argument a.
std::string percent_convert(const percent_spec& p, const jvalue& a) {
  switch (p.conv) {
    case 's':
    case 'r':
    case 'a':
      return percent_text(p, a);
    case 'c':
      return percent_char(p, a);
    case 'd':
    case 'i':
    case 'u':
    case 'o':
    case 'x':
    case 'X':
      return percent_integer(p, a);
    case 'e':
    case 'E':
    case 'f':
    case 'F':
    case 'g':
    case 'G':
      return percent_float(p, a);
    default:
      throw template_error(std::string("unsupported format character '") + p.conv + "'");
  }
}

}  // namespace

std::string str_format(const std::string& fmt, const call_args& a, int depth) {
  std::string out;
  field_numbering numbering;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      throw template_error("Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t j = field_end(fmt, i);
    format_field field = split_field(fmt.substr(i + 1, j - i - 1));
    i = j;
    if (field.spec.find('{') != std::string::npos) {
      if (depth >= 1) throw template_error("Max string recursion exceeded");
      field.spec = str_format(field.spec, a, depth + 1);
    }
    size_t e = 0;
    while (e < field.name.size() && field.name[e] != '.' && field.name[e] != '[') ++e;
    jvalue v = field_argument(field.name.substr(0, e), a, numbering);
    v = apply_accessors(std::move(v), field.name, e);
    out += format_value(convert_field(std::move(v), field.conversion), field.spec);
  }
  return out;
}

std::string percent_format(const std::string& fmt, const jvalue& args) {
  percent_args arguments(args);
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    size_t j = i + 1;
    const std::optional<jvalue> keyed = arguments.keyed(fmt, j);
    const percent_spec p = read_percent_spec(fmt, j, arguments);
    i = j;
    if (p.conv == '%') {
      out += '%';
      continue;
    }
    out += percent_convert(p, keyed ? *keyed : arguments.next());
  }
  arguments.check_all_converted();
  return out;
}

}  // namespace coserve::jinja
