#include "model/text/tokenizer/added_vocab.hpp"

#include <algorithm>

#include "model/text/tokenizer/utf8.hpp"

namespace coserve {

void added_token_matcher::add(std::string content, const added_token& token) {
  if (content.empty()) return;
  entries_.push_back({std::move(content), token});
}

void added_token_matcher::build() {
  for (auto& v : by_first_) v.clear();
  for (uint32_t i = 0; i < entries_.size(); ++i)
    by_first_[static_cast<unsigned char>(entries_[i].content[0])].push_back(i);
  for (auto& v : by_first_)
    std::stable_sort(v.begin(), v.end(), [&](uint32_t a, uint32_t b) {
      return entries_[a].content.size() > entries_[b].content.size();
    });
}

namespace {
char32_t last_char(std::string_view s) {
  if (s.empty()) return 0;
  std::size_t p = s.size() - 1;
  while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
  char32_t cp = 0;
  return utf8::decode(s, p, cp) ? cp : 0;
}
char32_t first_char(std::string_view s) {
  char32_t cp = 0;
  return !s.empty() && utf8::decode(s, 0, cp) ? cp : 0;
}
}  // namespace

void added_token_matcher::split(std::string_view text, std::vector<piece>& out) const {
  if (entries_.empty()) {
    if (!text.empty()) out.push_back({0, text.size(), -1});
    return;
  }
  std::size_t emitted = 0;  // end of the last piece pushed
  std::size_t pos = 0;
  while (pos < text.size()) {
    const auto& cands = by_first_[static_cast<unsigned char>(text[pos])];
    const entry* hit = nullptr;
    for (uint32_t idx : cands) {
      const auto& c = entries_[idx].content;
      if (text.compare(pos, c.size(), c) == 0) {
        hit = &entries_[idx];
        break;
      }
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    std::size_t start = pos, stop = pos + hit->content.size();
    pos = stop;
    const added_token& t = hit->token;
    if (t.single_word) {
      const bool space_before = start == 0 || !utf8::is_word_char(last_char(text.substr(0, start)));
      const bool space_after =
          stop == text.size() || !utf8::is_word_char(first_char(text.substr(stop)));
      if (!space_before || !space_after) continue;
    }
    if (t.lstrip) {
      std::size_t s = start;
      while (s > emitted) {
        const char32_t c = last_char(text.substr(0, s));
        if (!utf8::is_whitespace(c)) break;
        std::size_t p = s - 1;
        while (p > 0 && (static_cast<unsigned char>(text[p]) & 0xC0) == 0x80) --p;
        s = p;
      }
      start = s;
    }
    if (t.rstrip) {
      char32_t c;
      while (stop < text.size()) {
        const std::size_t n = utf8::decode(text, stop, c);
        if (n == 0 || !utf8::is_whitespace(c)) break;
        stop += n;
      }
      pos = std::max(pos, stop);
    }
    if (start > emitted) out.push_back({emitted, start, -1});
    out.push_back({start, stop, t.id});
    emitted = stop;
  }
  if (emitted < text.size()) out.push_back({emitted, text.size(), -1});
}

}  // namespace coserve
