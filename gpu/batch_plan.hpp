// batch_plan: the per-step batch metadata the host computes once and every layer's kernels reuse
// (FlashInfer's plan/run split). Pure integers, no CUDA: tested on the CPU.
//
// Token order is batch order: sequence i's new tokens occupy [cu_seqlens_q[i], cu_seqlens_q[i+1]).
#pragma once

#include <cstdint>
#include <vector>

#include "base/result.hpp"
#include "model/step.hpp"

namespace coserve::gpu {

// One unit of attention work; device layout (7 x int32, 28 bytes, no padding):
//   seq        index of the sequence in batch order
//   q_begin    first query token of the tile, relative to the sequence's new tokens
//   q_len      query tokens in the tile (<= q_tile)
//   kv_begin   first key position of this split
//   kv_end     one past the last key position of this split (causality is applied per query)
//   partial    -1: write the final output; otherwise the first partial row of this split
//              (rows partial + t for t in [0, q_len), each holding num_q_heads heads)
//   split      index of this split within its sequence
struct attn_work_item {
  int32_t seq;
  int32_t q_begin;
  int32_t q_len;
  int32_t kv_begin;
  int32_t kv_end;
  int32_t partial;
  int32_t split;
};

// One split sequence to merge; device layout (4 x int32): output token of q row 0, q_len,
// first partial row, number of splits. Partial row of (split s, token t) = partial + s*q_len + t.
struct attn_merge_item {
  int32_t token;
  int32_t q_len;
  int32_t partial;
  int32_t num_splits;
};

struct batch_plan_options {
  int32_t block_size = 16;  // tokens per KV block
  int32_t num_kv_heads = 8;
  int32_t gqa = 1;        // query heads per kv head
  int32_t num_sms = 132;  // multiprocessors of the device (split-KV heuristic)
  int32_t max_splits = 32;
};

struct batch_plan {
  int32_t num_tokens = 0;
  int32_t num_seqs = 0;
  // per token [num_tokens]
  std::vector<int32_t> positions;  // start_pos + index within the sequence's slice
  std::vector<int32_t>
      slot_mapping;  // block_table[pos / block_size] * block_size + pos % block_size
  // per sequence
  std::vector<int32_t> cu_seqlens_q;  // [num_seqs + 1] prefix sums of new tokens
  std::vector<int32_t> kv_lens;       // [num_seqs] start_pos + new tokens (keys after this step)
  std::vector<int32_t> block_table_offsets;  // [num_seqs + 1] into block_tables
  std::vector<int32_t> block_tables;         // all sequences' block tables, concatenated
  // sampling
  // token indices whose logits are sampled, in batch order: a sampled sequence's last token, or its
  // last 1 + num_draft tokens when it verifies proposals (the rows score the positions in order)
  std::vector<int32_t> sample_tokens;
  std::vector<int32_t> sample_seqs;  // the sequence index of each of them
  // attention
  std::vector<attn_work_item> work;
  std::vector<attn_merge_item> merges;
  int32_t num_partial_rows = 0;  // rows of the partial-output workspace
  int32_t q_tile = 1;
};

// Plans one step. Errors (invalid_argument) when a sequence's block table does not cover
// [0, start_pos + tokens), when a slice is empty, when start_pos is negative, or when num_draft is
// not in [0, tokens) (or is positive on a sequence that does not sample).
result<batch_plan> plan_batch(const std::vector<scheduled_seq>& seqs,
                              const batch_plan_options& opt);

}  // namespace coserve::gpu
