#include "model/tokenizer/regex.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace coserve {

namespace {

// Oniguruma (what the Python `tokenizers` uses) reads \p{Han} as the Script property, while
// PCRE2 10.40+ reads a bare script name as Script_Extensions (so \p{Han} would also match kana
// marks such as U+309E). Bare script names are rewritten to PCRE2's \p{sc:Name}; general
// categories and PCRE2's own special properties are left alone.
std::string onig_to_pcre2(std::string_view pattern) {
  static constexpr std::string_view k_categories[] = {
      "L", "Ll", "Lu", "Lt", "Lm", "Lo", "L&", "LC", "M", "Mn", "Mc", "Me", "N", "Nd", "Nl", "No",
      "P", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "S", "Sm", "Sc", "Sk", "So", "Z", "Zs", "Zl",
      "Zp", "C", "Cc", "Cf", "Cs", "Co", "Cn", "Any", "Xan", "Xps", "Xsp", "Xwd", "Xuc"};
  std::string out;
  out.reserve(pattern.size());
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 2 < pattern.size()) {
      const char k = pattern[i + 1];
      if ((k == 'p' || k == 'P') && pattern[i + 2] == '{') {
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
      out.push_back(c);
      out.push_back(k);
      ++i;
      continue;
    }
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

void regex::find_all(std::string_view text, std::vector<std::pair<std::size_t, std::size_t>>& out) const {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t start = 0;
  while (start <= text.size()) {
    const int rc = pcre2_match(impl_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
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
