// Which positions of a draft model's KV cache are valid: the draft shares the model's block
// tables (its own cache, the same block ids) but computes only what its proposals need, so the
// executor keeps, per block, how far the draft's K/V matches what the model's cache holds there.
//
// Per block: the sequence and block index it was last written for, how many of its leading
// positions hold the draft's K/V for the tokens (and prefix) the model's cache has there, and the
// token at each position as last computed into either cache (so a catch-up knows what to compute).
// The model's writes keep a position valid when its token is unchanged (a proposal accepted) and
// cut the block there when not (a proposal rejected); a block written for another sequence or at
// another block index (freed and given out again) starts over, and a copied block (copy-on-write)
// is taken over as it is by the next sequence writing it. A sequence's valid prefix ends at the
// first block not valid to its end, so a cut also covers every block after it; the draft then
// recomputes from there in order, which sets those blocks' counts afresh. Blocks of a cached
// prefix are valid as far as whoever computed them left them (the same tokens and prefix).
//
// Threads: one (the executor's step thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/step.hpp"

namespace coserve {

class draft_kv_map {
 public:
  draft_kv_map(int32_t num_blocks, int32_t block_size);

  // The first position of the sequence with `table` whose draft K/V is not valid (at most limit).
  int32_t valid_prefix(const std::vector<int32_t>& table, int32_t limit) const;
  // The token recorded at position p of the sequence with `table`.
  int32_t token_at(const std::vector<int32_t>& table, int32_t p) const;
  // The draft computed `toks` at positions [start, start + n) of sequence `id`; start must not be
  // past valid_prefix (the draft computes in order from there).
  void note_draft(seq_id_t id, const std::vector<int32_t>& table, int32_t start,
                  const int32_t* toks, int32_t n);
  // The model computed `toks` at [start, start + n) (after the draft's share of the same step).
  void note_model(seq_id_t id, const std::vector<int32_t>& table, int32_t start,
                  const int32_t* toks, int32_t n);
  // Block src was copied to dst in both caches.
  void note_copy(int32_t src, int32_t dst);

 private:
  struct block_state {
    seq_id_t owner = 0;
    int32_t index = -1;  // block index in the owner's table (-1: never written)
    int32_t valid = 0;
    bool copied = false;
  };
  struct slot {
    int32_t index = 0;   // block index in the table
    int32_t offset = 0;  // position within the block
    int32_t block = 0;   // block id
    size_t token = 0;    // index into tokens_
  };
  slot locate(const std::vector<int32_t>& table, int32_t p) const;

  std::vector<block_state> blocks_;
  std::vector<int32_t> tokens_;  // blocks x block size
  int32_t block_size_;
};

}  // namespace coserve
