#include "model/text/tokenizer/regex.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <utility>

namespace coserve {

namespace {

// Oniguruma (what the Python `tokenizers` uses for Split and Replace patterns) and PCRE2 read a
// few escapes differently; patterns are rewritten so PCRE2 matches what Oniguruma would:
// - \p{Han} is the Script property in Oniguruma, while PCRE2 10.40+ reads a bare script name as
//   Script_Extensions (so \p{Han} would also match kana marks such as U+309E). Bare script names
//   become PCRE2's \p{sc:Name}; general categories, binary properties and PCRE2's own special
//   properties are left alone.
// - Oniguruma's \w is Alphabetic | Mark | Decimal_Number | Connector_Punctuation, and outside a
//   class also the Latin-1 superscripts and fractions (U+00B2, B3, B9, BC-BE); PCRE2's UCP \w is
//   Letter | Number | '_'. \w, and \W outside a class, are spelled out (measured against the
//   `tokenizers` package over every code point).
// - \h is a hexadecimal digit in Oniguruma (horizontal space in PCRE2).
// - \s is the White_Space property in Oniguruma; PCRE2 adds U+180E. \s, and \S outside a
//   class, are spelled out.
// - POSIX brackets follow Unicode properties in Oniguruma: [:alpha:] is Alphabetic, [:alnum:]
//   Alphabetic | Nd, [:punct:] P | S, [:upper:] / [:lower:] the Uppercase / Lowercase properties,
//   [:word:] as \w in a class, [:space:] as \s, [:blank:] tab | Zs.
std::string onig_to_pcre2(std::string_view pattern) {
  static constexpr std::string_view k_categories[] = {
      "L", "Ll", "Lu", "Lt", "Lm", "Lo", "L&", "LC", "M", "Mn", "Mc", "Me", "N", "Nd", "Nl", "No",
      "P", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "S", "Sm", "Sc", "Sk", "So", "Z", "Zs", "Zl",
      "Zp", "C", "Cc", "Cf", "Cs", "Co", "Cn", "Any", "Xan", "Xps", "Xsp", "Xwd", "Xuc",
      // binary properties both engines know
      "Alphabetic", "Alpha", "White_Space", "WSpace", "Lowercase", "Lower", "Uppercase", "Upper",
      "Math", "Hex_Digit", "ASCII_Hex_Digit", "Ideographic", "Ideo", "Join_Control", "Emoji",
      "Emoji_Presentation", "Emoji_Modifier", "Emoji_Modifier_Base", "Emoji_Component",
      "Extended_Pictographic", "Dash", "Diacritic", "Extender", "Quotation_Mark",
      "Terminal_Punctuation", "Default_Ignorable_Code_Point", "Noncharacter_Code_Point",
      "Regional_Indicator"};
  static constexpr std::string_view k_word = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}";
  static constexpr std::string_view k_word_latin1 = "\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}";
  static constexpr std::string_view k_hex = "0-9a-fA-F";
  static constexpr std::string_view k_space =
      "\\x{09}-\\x{0D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
      "\\x{205F}\\x{3000}";
  static constexpr std::pair<std::string_view, std::string_view> k_posix[] = {
      {"alpha", "\\p{Alphabetic}"}, {"alnum", "\\p{Alphabetic}\\p{Nd}"}, {"punct", "\\p{P}\\p{S}"},
      {"upper", "\\p{Uppercase}"},  {"lower", "\\p{Lowercase}"},         {"word", k_word},
      {"space", k_space},           {"blank", "\\x{09}\\p{Zs}"}};
  std::string out;
  out.reserve(pattern.size());
  int class_depth = 0;  // inside [...] (Oniguruma allows nested classes)
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char k = pattern[i + 1];
      if ((k == 'p' || k == 'P') && i + 2 < pattern.size() && pattern[i + 2] == '{') {
        const std::size_t close = pattern.find('}', i + 3);
        if (close != std::string_view::npos) {
          std::string_view name = pattern.substr(i + 3, close - i - 3);
          const bool negated = !name.empty() && name.front() == '^';
          const std::string_view bare = negated ? name.substr(1) : name;
          bool category = bare.find_first_of(":=") != std::string_view::npos;
          for (auto cat : k_categories) category = category || bare == cat;
          out += pattern.substr(i, 3);
          if (negated) out.push_back('^');
          if (!category) out += "sc:";
          out += bare;
          out.push_back('}');
          i = close;
          continue;
        }
      }
      const std::string_view set = k == 'w' || k == 'W'   ? k_word
                                   : k == 'h' || k == 'H' ? k_hex
                                   : k == 's' || k == 'S' ? k_space
                                                          : "";
      if (!set.empty() && (k == 'w' || k == 'h' || k == 's' || class_depth == 0)) {
        const bool negated = k == 'W' || k == 'H' || k == 'S';
        if (class_depth == 0) out += negated ? "[^" : "[";
        out += set;
        if (class_depth == 0 && set == k_word) out += k_word_latin1;
        if (class_depth == 0) out.push_back(']');
        ++i;
        continue;
      }
      out.push_back(c);
      out.push_back(k);
      ++i;
      continue;
    }
    if (c == '[') {
      if (class_depth > 0 && i + 1 < pattern.size() && pattern[i + 1] == ':') {
        // A POSIX bracket such as [:alpha:] inside a class.
        const std::size_t close = pattern.find(":]", i + 2);
        if (close != std::string_view::npos) {
          const std::string_view name = pattern.substr(i + 2, close - i - 2);
          std::string_view as;
          for (auto [posix, set] : k_posix)
            if (name == posix) as = set;
          out += as.empty() ? pattern.substr(i, close + 2 - i) : as;
          i = close + 1;
          continue;
        }
      }
      ++class_depth;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
      continue;
    }
    if (c == ']' && class_depth > 0) --class_depth;
    out.push_back(c);
  }
  return out;
}

}  // namespace

struct regex::impl {
  pcre2_code* code = nullptr;
  ~impl() { pcre2_code_free(code); }
};

result<regex> regex::compile(std::string_view onig_pattern) {
  const std::string pattern = onig_to_pcre2(onig_pattern);
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    return make_error("invalid_argument", "regex '" + std::string(onig_pattern) + "' at offset " +
                                              std::to_string(offset) + ": " +
                                              reinterpret_cast<const char*>(msg));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // best effort: the interpreter is the fallback
  auto p = std::make_shared<impl>();
  p->code = code;
  regex r;
  r.impl_ = std::move(p);
  return r;
}

result<regex> regex::literal(std::string_view text) {
  std::string escaped;
  for (char c : text) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          static_cast<unsigned char>(c) >= 0x80))
      escaped.push_back('\\');
    escaped.push_back(c);
  }
  return compile(escaped);
}

void regex::find_all(std::string_view text,
                     std::vector<std::pair<std::size_t, std::size_t>>& out) const {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t start = 0;
  while (start <= text.size()) {
    const int rc =
        pcre2_match(impl_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const std::size_t b = ov[0], e = ov[1];
    if (e == b) {
      // Empty match: step over one character.
      if (b >= text.size()) break;
      std::size_t next = b + 1;
      while (next < text.size() && (static_cast<unsigned char>(text[next]) & 0xC0) == 0x80) ++next;
      start = next;
      continue;
    }
    out.emplace_back(b, e);
    start = e;
  }
  pcre2_match_data_free(md);
}

}  // namespace coserve
