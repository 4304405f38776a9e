#include "model/text/tokenizer/precompiled.hpp"

#include <utf8proc.h>

#include <cstring>

#include "model/text/tokenizer/utf8.hpp"

namespace coserve {

namespace {

// darts-clone unit fields.
uint32_t offset_of(uint32_t u) noexcept { return (u >> 10) << ((u & (1u << 9)) >> 6); }
uint32_t label_of(uint32_t u) noexcept { return u & ((1u << 31) | 0xFFu); }
bool has_leaf(uint32_t u) noexcept { return ((u >> 8) & 1u) == 1u; }
uint32_t value_of(uint32_t u) noexcept { return u & ((1u << 31) - 1); }

result<std::string> decode_base64(std::string_view text) {
  auto sextet = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    const int v = sextet(c);
    if (v < 0) return make_error("invalid_argument", "precompiled_charsmap is not base64");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFFu));
    }
  }
  return out;
}

}  // namespace

result<precompiled_charsmap> precompiled_charsmap::parse(std::string_view blob) {
  precompiled_charsmap m;
  if (blob.empty()) return m;
  uint32_t trie_bytes = 0;
  if (blob.size() < 4) return make_error("invalid_argument", "precompiled_charsmap is truncated");
  for (int k = 3; k >= 0; --k)
    trie_bytes = (trie_bytes << 8) | static_cast<unsigned char>(blob[static_cast<std::size_t>(k)]);
  if (trie_bytes % 4 != 0 || trie_bytes > blob.size() - 4)
    return make_error("invalid_argument", "precompiled_charsmap's trie size does not fit the data");
  m.units_.resize(trie_bytes / 4);
  for (std::size_t i = 0; i < m.units_.size(); ++i) {
    uint32_t u = 0;
    for (int k = 3; k >= 0; --k)
      u = (u << 8) | static_cast<unsigned char>(blob[4 + 4 * i + static_cast<std::size_t>(k)]);
    m.units_[i] = u;
  }
  m.replacements_ = std::string(blob.substr(4 + trie_bytes));
  if (!utf8::is_valid(m.replacements_))
    return make_error("invalid_argument", "precompiled_charsmap's replacements are not UTF-8");
  return m;
}

result<precompiled_charsmap> precompiled_charsmap::from_base64(std::string_view text) {
  auto blob = decode_base64(text);
  if (!blob) return std::move(blob).err();
  return parse(*blob);
}

std::optional<std::string_view> precompiled_charsmap::transform(std::string_view bytes) const {
  if (units_.empty()) return std::nullopt;
  std::size_t pos = offset_of(units_[0]);
  for (char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == 0) break;
    pos ^= c;
    if (pos >= units_.size()) return std::nullopt;
    const uint32_t unit = units_[pos];
    if (label_of(unit) != c) return std::nullopt;
    pos ^= offset_of(unit);
    if (has_leaf(unit)) {  // the shortest key: the first leaf on the way
      if (pos >= units_.size()) return std::nullopt;
      const std::size_t at = value_of(units_[pos]);
      if (at >= replacements_.size()) return std::nullopt;
      const std::size_t end = replacements_.find('\0', at);
      return std::string_view(replacements_)
          .substr(at, (end == std::string::npos ? replacements_.size() : end) - at);
    }
  }
  return std::nullopt;
}

std::string precompiled_charsmap::apply(std::string_view text) const {
  if (units_.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  auto whole_cluster = [&](std::string_view cluster) {
    if (cluster.size() < 6) {
      if (const auto r = transform(cluster)) {
        out += *r;
        return;
      }
    }
    char32_t cp;
    for (std::size_t i = 0; i < cluster.size();) {
      const std::size_t n = std::max<std::size_t>(1, utf8::decode(cluster, i, cp));
      const std::string_view part = cluster.substr(i, n);
      if (const auto r = transform(part))
        out += *r;
      else
        out += part;
      i += n;
    }
  };
  // Extended grapheme clusters (utf8proc's rules).
  utf8proc_int32_t state = 0;
  char32_t prev = 0;
  std::size_t begin = 0;
  char32_t cp;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = std::max<std::size_t>(1, utf8::decode(text, i, cp));
    if (i > 0 && utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(prev),
                                                  static_cast<utf8proc_int32_t>(cp), &state)) {
      whole_cluster(text.substr(begin, i - begin));
      begin = i;
    }
    prev = cp;
    i += n;
  }
  if (begin < text.size()) whole_cluster(text.substr(begin));
  return out;
}

}  // namespace coserve
