#include "model/draft_kv_map.hpp"

#include <algorithm>
#include <cstddef>

namespace coserve {

draft_kv_map::draft_kv_map(int32_t num_blocks, int32_t block_size)
    : blocks_(size_t(num_blocks)),
      tokens_(size_t(num_blocks) * size_t(block_size), -1),
      block_size_(block_size) {}

int32_t draft_kv_map::valid_prefix(const std::vector<int32_t>& table, int32_t limit) const {
  int32_t n = 0;
  for (int32_t b : table) {
    if (n >= limit) break;
    const int32_t v = blocks_[size_t(b)].valid;
    n += v;
    if (v < block_size_) break;
  }
  return std::min(n, limit);
}

draft_kv_map::slot draft_kv_map::locate(const std::vector<int32_t>& table, int32_t p) const {
  slot s;
  s.index = p / block_size_;
  s.offset = p % block_size_;
  s.block = table[size_t(s.index)];
  s.token = size_t(s.block) * size_t(block_size_) + size_t(s.offset);
  return s;
}

int32_t draft_kv_map::token_at(const std::vector<int32_t>& table, int32_t p) const {
  return tokens_[locate(table, p).token];
}

void draft_kv_map::note_draft(seq_id_t id, const std::vector<int32_t>& table, int32_t start,
                              const int32_t* toks, int32_t n) {
  for (int32_t p = start; p < start + n; ++p) {
    const slot at = locate(table, p);
    block_state& st = blocks_[size_t(at.block)];
    st.owner = id;
    st.index = at.index;
    st.copied = false;
    st.valid = at.offset + 1;  // in order from the valid prefix: every position before it is valid
    tokens_[at.token] = toks[p - start];
  }
}

void draft_kv_map::note_model(seq_id_t id, const std::vector<int32_t>& table, int32_t start,
                              const int32_t* toks, int32_t n) {
  for (int32_t p = start; p < start + n; ++p) {
    const slot at = locate(table, p);
    block_state& st = blocks_[size_t(at.block)];
    int32_t& tok = tokens_[at.token];
    if (st.owner != id || st.index != at.index) {
      if (!st.copied) st.valid = 0;
      st.owner = id;
      st.index = at.index;
    }
    st.copied = false;
    if (at.offset < st.valid && tok != toks[p - start]) st.valid = at.offset;
    tok = toks[p - start];
  }
}

void draft_kv_map::note_copy(int32_t src, int32_t dst) {
  blocks_[size_t(dst)] = blocks_[size_t(src)];
  blocks_[size_t(dst)].copied = true;
  std::copy_n(tokens_.begin() + ptrdiff_t(src) * block_size_, block_size_,
              tokens_.begin() + ptrdiff_t(dst) * block_size_);
}

}  // namespace coserve
