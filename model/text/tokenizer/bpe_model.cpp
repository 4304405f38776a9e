#include "model/text/tokenizer/bpe_model.hpp"

#include <cstdio>
#include <queue>

#include "model/text/tokenizer/byte_level.hpp"
#include "model/text/tokenizer/utf8.hpp"

namespace coserve {

bpe_model::bpe_model(string_id_map vocab,
                     const std::vector<std::pair<std::string, std::string>>& merges, options opts)
    : opts_(opts) {
  byte_ids_.fill(-1);
  vocab_.reserve(vocab.size());
  if (opts_.byte_mode) {
    for (const auto& [text, id] : vocab)
      if (auto bytes = byte_level::to_bytes(text)) vocab_.emplace(std::move(*bytes), id);
    for (int b = 0; b < 256; ++b)
      if (auto it = vocab_.find(std::string(1, static_cast<char>(b))); it != vocab_.end())
        byte_ids_[b] = it->second;
  } else {
    vocab_ = std::move(vocab);
    if (opts_.byte_fallback) {
      char name[8];
      for (int b = 0; b < 256; ++b) {
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        if (auto it = vocab_.find(std::string_view(name)); it != vocab_.end())
          byte_ids_[b] = it->second;
      }
    }
  }
  merges_.reserve(merges.size());
  int32_t rank = 0;
  std::string joined;
  for (const auto& [a, b] : merges) {
    const int32_t r = rank++;
    std::optional<std::string> ka = a, kb = b;
    if (opts_.byte_mode) {
      ka = byte_level::to_bytes(a);
      kb = byte_level::to_bytes(b);
      if (!ka || !kb) continue;
    }
    auto ia = vocab_.find(*ka), ib = vocab_.find(*kb);
    joined = *ka + *kb;
    auto ij = vocab_.find(joined);
    if (ia == vocab_.end() || ib == vocab_.end() || ij == vocab_.end()) continue;
    merges_.insert(ia->second, ib->second, {r, ij->second});
  }
}

std::optional<int32_t> bpe_model::find(std::string_view key) const {
  if (auto it = vocab_.find(key); it != vocab_.end()) return it->second;
  return std::nullopt;
}

void bpe_model::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (opts_.ignore_merges) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= k_max_cached_word;
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (auto it = cache_.find(word); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const std::size_t first = out.size();
  merge_word(word, out);
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (cache_.size() >= k_max_cache_entries) cache_.clear();
    cache_.emplace(
        std::string(word),
        std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
  }
}

// The merge loop, as Hugging Face's Word::merge_all does it: repeatedly apply the lowest-ranked
// merge present (leftmost first among equal ranks), using a heap of candidate pairs and a linked
// list of symbols; stale heap entries are recognised and skipped.
void bpe_model::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  struct symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  std::vector<symbol> syms;
  syms.reserve(word.size());
  auto add = [&](int32_t id) {
    const auto n = static_cast<int32_t>(syms.size());
    syms.push_back({id, n - 1, n + 1, true});
  };

  if (opts_.byte_mode) {
    for (unsigned char b : word)
      if (byte_ids_[b] >= 0) add(byte_ids_[b]);
  } else {
    std::optional<int32_t> pending_unk;  // fuse_unk: consecutive unknown characters become one
    char32_t cp;
    for (std::size_t i = 0; i < word.size();) {
      std::size_t n = utf8::decode(word, i, cp);
      if (n == 0) n = 1;
      const std::string_view ch = word.substr(i, n);
      i += n;
      if (auto it = vocab_.find(ch); it != vocab_.end()) {
        if (pending_unk) add(*pending_unk), pending_unk.reset();
        add(it->second);
        continue;
      }
      if (opts_.byte_fallback) {
        bool all = true;
        for (unsigned char b : ch) all = all && byte_ids_[b] >= 0;
        if (all) {
          if (pending_unk) add(*pending_unk), pending_unk.reset();
          for (unsigned char b : ch) add(byte_ids_[b]);
          continue;
        }
      }
      if (opts_.unk_id) {
        if (pending_unk && !opts_.fuse_unk) add(*pending_unk);
        pending_unk = opts_.unk_id;
      }
    }
    if (pending_unk) add(*pending_unk);
  }
  if (syms.empty()) return;
  syms.back().next = -1;

  struct candidate {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const candidate& o) const noexcept {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<candidate, std::vector<candidate>, std::greater<>> heap;
  auto push_pair = [&](int32_t left) {
    const int32_t right = syms[left].next;
    if (right < 0) return;
    if (const auto* m = merges_.find(syms[left].id, syms[right].id))
      heap.push({m->rank, left, m->new_id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) push_pair(i);

  while (!heap.empty()) {
    const candidate top = heap.top();
    heap.pop();
    symbol& left = syms[top.pos];
    if (!left.alive || left.next < 0) continue;
    symbol& right = syms[left.next];
    const auto* m = merges_.find(left.id, right.id);
    if (m == nullptr || m->new_id != top.new_id) continue;
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) syms[left.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

}  // namespace coserve
