#include "model/text/tokenizer/normalizer.hpp"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>

#include "model/text/tokenizer/utf8.hpp"

namespace coserve {

namespace {

std::string utf8proc_map_string(const std::string& s, int options) {
  utf8proc_uint8_t* out = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                              static_cast<utf8proc_ssize_t>(s.size()), &out,
                              static_cast<utf8proc_option_t>(options));
  if (n < 0) return s;  // only on invalid input, which the tokenizer never passes
  std::string r(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
  std::free(out);
  return r;
}

std::string lowercase(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  char32_t cp;
  for (std::size_t i = 0; i < s.size();) {
    std::size_t n = utf8::decode(s, i, cp);
    if (n == 0) return out;
    if (cp == 0x130) {
      out +=
          "i\xCC\x87";  // the one full (multi-code-point) lowercase mapping: U+0130 -> i + U+0307
    } else {
      utf8::append(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    }
    i += n;
  }
  return out;
}

std::string strip(const std::string& s, bool left, bool right) {
  std::size_t b = 0, e = s.size();
  char32_t cp;
  if (left)
    while (b < e) {
      std::size_t n = utf8::decode(s, b, cp);
      if (n == 0 || !utf8::is_whitespace(cp)) break;
      b += n;
    }
  if (right)
    while (e > b) {
      std::size_t start = e - 1;
      while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      std::size_t n = utf8::decode(s, start, cp);
      if (n == 0 || !utf8::is_whitespace(cp)) break;
      e = start;
    }
  return s.substr(b, e - b);
}

// Hugging Face's BERT character classes (tokenizers' normalizers/bert.rs).
bool bert_whitespace(char32_t c) noexcept {
  return c == U'\t' || c == U'\n' || c == U'\r' || utf8::is_whitespace(c);
}
// Control, format and private-use characters ("other" as the unicode_categories crate defines it),
// except tab, newline and carriage return.
bool bert_control(char32_t c) noexcept {
  if (c == U'\t' || c == U'\n' || c == U'\r') return false;
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF || cat == UTF8PROC_CATEGORY_CO;
}
// The CJK Unified Ideographs blocks BERT puts spaces around.
bool cjk_ideograph(char32_t c) noexcept {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// NFD, then every nonspacing mark (Mn) dropped.
std::string strip_accents(const std::string& s) {
  const std::string nfd = utf8proc_map_string(s, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
  std::string out;
  out.reserve(nfd.size());
  char32_t cp;
  for (std::size_t i = 0; i < nfd.size();) {
    const std::size_t n = utf8::decode(nfd, i, cp);
    if (n == 0) break;
    if (utf8proc_category(static_cast<utf8proc_int32_t>(cp)) != UTF8PROC_CATEGORY_MN)
      out.append(nfd, i, n);
    i += n;
  }
  return out;
}

// BertNormalizer: clean text, CJK spacing, accents, lowercase, in that order.
std::string bert_normalize(const std::string& s, bool clean_text, bool handle_chinese_chars,
                           bool accents, bool lower) {
  std::string out;
  out.reserve(s.size());
  char32_t cp;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8::decode(s, i, cp);
    if (n == 0) break;
    i += n;
    if (clean_text) {
      if (cp == 0 || cp == 0xFFFD || bert_control(cp)) continue;
      if (bert_whitespace(cp)) cp = U' ';
    }
    if (handle_chinese_chars && cjk_ideograph(cp)) {
      out.push_back(' ');
      utf8::append(out, cp);
      out.push_back(' ');
    } else {
      utf8::append(out, cp);
    }
  }
  if (accents) out = strip_accents(out);
  if (lower) out = lowercase(out);
  return out;
}

}  // namespace

std::string replace_all(const std::string& text, const std::string& literal,
                        const std::optional<regex>& re, const std::string& content,
                        std::size_t* prefix) {
  std::vector<std::pair<std::size_t, std::size_t>> m;
  if (re) {
    re->find_all(text, m);
  } else if (!literal.empty()) {
    for (std::size_t p = text.find(literal); p != std::string::npos;
         p = text.find(literal, p + literal.size()))
      m.emplace_back(p, p + literal.size());
  }
  // *prefix: where the first *prefix bytes end up; a match that starts inside them counts whole.
  std::size_t zend = prefix != nullptr ? *prefix : 0;
  bool done = prefix == nullptr || zend == 0;
  std::string out;
  out.reserve(text.size());
  std::size_t last = 0;
  for (auto [b, e] : m) {
    if (!done && b >= zend) {
      *prefix = out.size() + (zend > last ? zend - last : 0);
      done = true;
    }
    out.append(text, last, b - last);
    out += content;
    if (!done) zend = std::max(zend, e);
    last = e;
  }
  if (!done) *prefix = out.size() + (zend > last ? zend - last : 0);
  out.append(text, last);
  return out;
}

result<normalizer> normalizer::from_json(simdjson::dom::element node) {
  normalizer n;
  if (node.is_null()) return n;
  if (auto r = n.add(node); !r) return std::move(r).err();
  return n;
}

result<void> normalizer::add(simdjson::dom::element node) {
  std::string_view type;
  if (node["type"].get(type)) return make_error("invalid_argument", "normalizer without a type");
  if (type == "Sequence") {
    simdjson::dom::array arr;
    if (node["normalizers"].get(arr))
      return make_error("invalid_argument", "Sequence normalizer without normalizers");
    for (auto child : arr)
      if (auto r = add(child); !r) return r;
    return {};
  }
  step s{};
  if (type == "NFC")
    s.k = kind::nfc;
  else if (type == "NFD")
    s.k = kind::nfd;
  else if (type == "NFKC")
    s.k = kind::nfkc;
  else if (type == "NFKD")
    s.k = kind::nfkd;
  else if (type == "Lowercase")
    s.k = kind::lowercase;
  else if (type == "Prepend") {
    s.k = kind::prepend;
    std::string_view p;
    if (node["prepend"].get(p))
      return make_error("invalid_argument", "Prepend normalizer without prepend");
    s.text = p;
  } else if (type == "Replace") {
    s.k = kind::replace;
    std::string_view content, pat;
    if (node["content"].get(content))
      return make_error("invalid_argument", "Replace normalizer without content");
    s.text = content;
    if (!node["pattern"]["String"].get(pat)) {
      s.literal = pat;
    } else if (!node["pattern"]["Regex"].get(pat)) {
      auto re = regex::compile(pat);
      if (!re) return std::move(re).err();
      s.re = std::move(*re);
    } else {
      return make_error("invalid_argument", "Replace normalizer without a pattern");
    }
  } else if (type == "Strip") {
    s.k = kind::strip;
    bool v = false;
    if (!node["strip_left"].get(v)) s.left = v;
    if (!node["strip_right"].get(v)) s.right = v;
  } else if (type == "BertNormalizer") {
    s.k = kind::bert;
    bool v = false;
    if (!node["clean_text"].get(v)) s.bert.clean_text = v;
    if (!node["handle_chinese_chars"].get(v)) s.bert.handle_chinese_chars = v;
    if (!node["lowercase"].get(v)) s.bert.lowercase = v;
    // strip_accents: null (or absent) follows lowercase.
    s.bert.strip_accents = node["strip_accents"].get(v) ? s.bert.lowercase : v;
  } else if (type == "StripAccents") {
    s.k = kind::strip_accents;
  } else if (type == "Precompiled") {
    s.k = kind::precompiled;
    std::string_view blob;
    if (node["precompiled_charsmap"].is_null()) return {};  // no map: nothing to do
    if (node["precompiled_charsmap"].get(blob))
      return make_error("invalid_argument", "Precompiled normalizer without precompiled_charsmap");
    auto m = precompiled_charsmap::from_base64(blob);
    if (!m) return std::move(m).err();
    if (m->empty()) return {};
    s.charsmap = std::make_shared<const precompiled_charsmap>(std::move(*m));
  } else {
    return make_error("unsupported", "unsupported normalizer type '" + std::string(type) + "'");
  }
  steps_.push_back(std::move(s));
  return {};
}

namespace {

// The bytes of `whole`, the normal form of `text`, that the first z bytes of `text` become: those
// bytes normalized on their own, or the first character of `whole` where composition joined what
// followed to them.
std::size_t normalized_prefix(const std::string& text, const std::string& whole, std::size_t z,
                              int options) {
  if (z == 0) return 0;
  const std::string head = utf8proc_map_string(text.substr(0, z), options);
  if (whole.compare(0, head.size(), head) == 0) return head.size();
  // Composition took in what followed: count the first character of the result.
  char32_t cp;
  const std::size_t n = utf8::decode(whole, 0, cp);
  return n == 0 ? head.size() : std::min(whole.size(), std::max(n, head.size()));
}

}  // namespace

std::string normalizer::apply(std::string text, std::size_t* start_len) const {
  std::size_t z =
      start_len != nullptr ? std::min(*start_len, text.size()) : 0;  // from the first character
  const auto track = [&](auto&& f) {
    if (start_len != nullptr) z = std::min(f(), text.size());
  };
  bool ascii = true;
  for (char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  for (const auto& s : steps_) {
    // Unicode normal forms leave ASCII unchanged; skipping them is the common fast path.
    if (ascii && (s.k == kind::nfc || s.k == kind::nfd || s.k == kind::nfkc || s.k == kind::nfkd))
      continue;
    const int nf = s.k == kind::nfc    ? UTF8PROC_STABLE | UTF8PROC_COMPOSE
                   : s.k == kind::nfd  ? UTF8PROC_STABLE | UTF8PROC_DECOMPOSE
                   : s.k == kind::nfkc ? UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT
                                       : UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
    switch (s.k) {
      case kind::nfc:
      case kind::nfd:
      case kind::nfkc:
      case kind::nfkd: {
        std::string whole = utf8proc_map_string(text, nf);
        const std::size_t nz = start_len != nullptr ? normalized_prefix(text, whole, z, nf) : 0;
        text = std::move(whole);
        track([&] { return nz; });
        break;
      }
      case kind::lowercase: {
        std::size_t nz = start_len != nullptr ? lowercase(text.substr(0, z)).size() : 0;
        text = lowercase(text);
        track([&] { return nz; });
        break;
      }
      case kind::prepend:
        if (!text.empty()) {
          text = s.text + text;
          track([&] { return z > 0 ? z + s.text.size() : 0; });
        }
        ascii = false;
        break;
      case kind::replace: {
        std::size_t nz = z;
        text = replace_all(text, s.literal, s.re, s.text, start_len != nullptr ? &nz : nullptr);
        track([&] { return nz; });
        ascii = false;
        break;
      }
      case kind::bert:
      case kind::strip_accents:
      case kind::precompiled: {
        // Character by character (Precompiled: by grapheme cluster), so the first character's
        // share is what it becomes on its own.
        const std::size_t nz = start_len != nullptr ? apply_step(s, text.substr(0, z)).size() : 0;
        text = apply_step(s, std::move(text));
        track([&] { return nz; });
        ascii = false;
        break;
      }
      case kind::strip: {
        std::size_t before = text.size();
        std::string stripped = strip(text, s.left, false);
        const std::size_t removed_left = before - stripped.size();
        if (s.right) stripped = strip(stripped, false, true);
        text = std::move(stripped);
        track([&] { return z > removed_left ? z - removed_left : 0; });
        break;
      }
    }
  }
  if (start_len != nullptr) *start_len = z;
  return text;
}

std::string normalizer::apply_step(const step& s, std::string text) {
  switch (s.k) {
    case kind::bert:
      return bert_normalize(text, s.bert.clean_text, s.bert.handle_chinese_chars,
                            s.bert.strip_accents, s.bert.lowercase);
    case kind::strip_accents:
      return strip_accents(text);
    case kind::precompiled:
      return s.charsmap->apply(text);
    default:
      return text;
  }
}

std::string unicode_lowercase(const std::string& text) { return lowercase(text); }

}  // namespace coserve
