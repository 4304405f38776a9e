#include "model/text/tokenizer/unigram_model.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>

namespace coserve {

namespace {
// Hugging Face's (and SentencePiece's) penalty for an unknown character: below every piece.
constexpr double k_unk_penalty = 10.0;
}  // namespace

unigram_model::unigram_model(std::vector<std::pair<std::string, double>> pieces, int32_t unk_id,
                             bool byte_fallback)
    : pieces_(std::move(pieces)), unk_id_(unk_id), byte_fallback_(byte_fallback) {
  double min_score = std::numeric_limits<double>::infinity();
  ids_.reserve(pieces_.size());
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    ids_[pieces_[i].first] = static_cast<int32_t>(i);
    min_score = std::min(min_score, pieces_[i].second);
  }
  unk_score_ = (pieces_.empty() ? 0.0 : min_score) - k_unk_penalty;
  // The trie over the distinct texts, sorted bytewise (a text before its extensions).
  std::vector<uint32_t> order;
  order.reserve(ids_.size());
  for (const auto& [text, id] : ids_)
    if (!text.empty()) order.push_back(static_cast<uint32_t>(id));
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return pieces_[a].first < pieces_[b].first; });
  trie_.reserve(order.size() * 2 + 1);
  trie_.emplace_back();
  build(order);
}

void unigram_model::build(const std::vector<uint32_t>& order) {
  // Iteratively (a piece may be thousands of bytes long): each task is a node and the sorted
  // pieces [lo, hi) that share its depth-byte prefix; its children are allocated together.
  struct task {
    std::size_t lo, hi, depth;
    uint32_t at;
  };
  std::vector<task> todo{{0, order.size(), 0, 0}};
  while (!todo.empty()) {
    const task t = todo.back();
    todo.pop_back();
    std::size_t lo = t.lo;
    const std::size_t hi = t.hi, depth = t.depth;
    const uint32_t at = t.at;
    if (lo < hi && pieces_[order[lo]].first.size() == depth) {
      trie_[at].piece = static_cast<int32_t>(order[lo]);
      ++lo;
    }
    const auto byte_at = [&](std::size_t k) {
      return static_cast<uint8_t>(pieces_[order[k]].first[depth]);
    };
    std::size_t groups = 0;
    for (std::size_t k = lo; k < hi; ++k)
      if (k == lo || byte_at(k) != byte_at(k - 1)) ++groups;
    const auto begin = static_cast<uint32_t>(trie_.size());
    trie_[at].child_begin = begin;
    trie_[at].child_count = static_cast<uint16_t>(groups);
    trie_.resize(trie_.size() + groups);
    uint32_t slot = begin;
    for (std::size_t k = lo; k < hi; ++slot) {
      std::size_t end = k + 1;
      while (end < hi && byte_at(end) == byte_at(k)) ++end;
      trie_[slot].byte = byte_at(k);
      todo.push_back({k, end, depth + 1, slot});
      k = end;
    }
  }
}

const unigram_model::node* unigram_model::child(const node& n, uint8_t b) const noexcept {
  const node* first = trie_.data() + n.child_begin;
  const node* last = first + n.child_count;
  const node* it =
      std::lower_bound(first, last, b, [](const node& x, uint8_t v) { return x.byte < v; });
  return it != last && it->byte == b ? it : nullptr;
}

void unigram_model::unknown(std::string_view text, std::vector<int32_t>& out) const {
  if (byte_fallback_) {
    const std::size_t mark = out.size();
    bool all = true;
    char name[8];
    for (unsigned char c : text) {
      std::snprintf(name, sizeof name, "<0x%02X>", c);
      const auto it = ids_.find(std::string_view(name, 6));
      if (it == ids_.end()) {
        all = false;
        break;
      }
      out.push_back(it->second);
    }
    if (all) return;
    out.resize(mark);
  }
  if (unk_id_ >= 0) out.push_back(unk_id_);
}

void unigram_model::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  const std::size_t n = word.size();
  if (n == 0) return;
  struct best {
    double score = 0;
    int64_t start = -1;  // -1: no path ends here yet
    int32_t id = -1;
  };
  std::vector<best> at(n + 1);
  at[0].start = 0;
  for (std::size_t start = 0; start < n;) {
    const double here = at[start].score;
    const auto lead = static_cast<unsigned char>(word[start]);
    const std::size_t char_len = std::min<std::size_t>(n - start, lead < 0x80    ? 1
                                                                  : lead >= 0xF0 ? 4
                                                                  : lead >= 0xE0 ? 3
                                                                  : lead >= 0xC0 ? 2
                                                                                 : 1);
    bool single = false;  // a piece covers exactly this character
    const node* cur = trie_.data();
    for (std::size_t end = start; end < n;) {
      cur = child(*cur, static_cast<uint8_t>(word[end]));
      if (cur == nullptr) break;
      ++end;
      if (cur->piece < 0) continue;
      const double candidate = here + pieces_[static_cast<std::size_t>(cur->piece)].second;
      if (at[end].start < 0 || candidate > at[end].score) {
        at[end] = {candidate, static_cast<int64_t>(start), cur->piece};
      }
      if (end - start == char_len) single = true;
    }
    if (!single) {
      const double candidate = here + unk_score_;
      best& target = at[start + char_len];
      if (target.start < 0 || candidate > target.score)
        target = {candidate, static_cast<int64_t>(start), unk_id_};
    }
    start += char_len;
  }
  // Back from the end; runs of unknown pieces fuse into one.
  struct segment {
    std::size_t begin, end;
  };
  std::vector<segment> segments;
  for (std::size_t end = n; end > 0;) {
    const best& b = at[end];
    const auto begin = static_cast<std::size_t>(b.start);
    const bool unk = b.id == unk_id_ && unk_id_ >= 0;
    if (unk && !segments.empty() && at[segments.back().end].id == unk_id_ &&
        segments.back().begin == end)
      segments.back().begin = begin;
    else
      segments.push_back({begin, end});
    end = begin;
  }
  for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
    const std::string_view text = word.substr(it->begin, it->end - it->begin);
    if (const auto found = ids_.find(text); found != ids_.end())
      out.push_back(found->second);
    else
      unknown(text, out);
  }
}

std::optional<int32_t> unigram_model::find(std::string_view key) const {
  const auto it = ids_.find(key);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

}  // namespace coserve
