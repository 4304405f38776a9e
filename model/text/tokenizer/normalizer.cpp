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

}  // namespace coserve
