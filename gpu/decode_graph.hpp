// Host side of the CUDA graphs for decode-only steps (plain integers, tested on the CPU).
//
// A decode-only step is replayed from a graph captured at startup for its batch size rounded up to
// a bucket (1, 2, 4, 8, then multiples of 8 up to max_num_seqs, as vLLM). Every graph reads its
// metadata from one fixed arena on the device (the same addresses each step); the host fills a
// staging copy of it per step and uploads it before the replay. Rows beyond the batch are padding:
// one token at position 0, no KV write (slot -1), attention over the scratch block only, sampled
// greedily into a scratch last-token slot, and never reported. The attention kernels run a fixed
// grid per bucket (the most work items a batch of that size can plan) and read the real counts
// from the arena.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/result.hpp"
#include "gpu/batch_plan.hpp"
#include "gpu/sample_row_params.hpp"

namespace coserve::gpu {

// Bucket sizes for max_num_seqs (>= 1): 1, 2, 4, 8, 16, 24, ... and max_num_seqs itself.
std::vector<int32_t> decode_graph_buckets(int32_t max_num_seqs);
// The smallest bucket >= n (buckets ascending), 0 when n is beyond them all or n < 1.
int32_t bucket_for(std::span<const int32_t> buckets, int32_t n);

// Byte offsets of the arena's arrays (16-byte aligned), sized for `rows` rows with at most
// `max_blocks_per_seq` blocks each, `max_work` attention work items and `max_merges` merges.
// counts = {work items, merges} of the step. block_tables is last, so a step uploads the arena up
// to its own block tables' end (upload_bytes).
struct graph_arena_layout {
  int32_t rows = 0, max_blocks_per_seq = 0, max_work = 0, max_merges = 0;
  size_t ids = 0, positions = 0, slots = 0, cu_seqlens = 0, kv_lens = 0, bt_offsets = 0,
         sample_tokens = 0, params = 0, row_slots = 0, counts = 0, work = 0, merges = 0,
         block_tables = 0;
  size_t bytes = 0;
};
graph_arena_layout make_graph_arena_layout(int32_t rows, int32_t max_blocks_per_seq,
                                           int32_t max_work, int32_t max_merges);

// The most attention work items a decode batch of `rows` sequences can plan (every context at
// max_kv_len, which splits the most), and its merges.
struct graph_capacity {
  int32_t max_work = 0, max_merges = 0;
};
graph_capacity decode_graph_capacity(int32_t rows, int32_t max_kv_len,
                                     const batch_plan_options& opt);

// One decode step's arena contents for a graph of `bucket` rows. The batch: every sequence one
// token (ids: literal ids or last-token references -(slot + 1), as the eager path), sampled.
struct graph_step_input {
  std::span<const scheduled_seq> seqs;
  std::span<const int32_t> ids;               // one per sequence
  std::span<const sample_row_params> params;  // one per sequence
  std::span<const int32_t> row_slots;         // one per sequence: its last-token slot
  int32_t pad_block = 0;                      // the scratch KV block padded rows attend over
  int32_t pad_slot = 0;                       // the scratch last-token slot padded rows write
};
// Plans the padded batch and writes it into `staging` at the layout's offsets. Returns the bytes to
// upload; `planned` (optional) receives the padded batch's plan. Errors: a sequence that is not a
// one-token sampled decode, more sequences than the bucket, a plan beyond the layout's capacity, or
// staging too small.
result<size_t> fill_graph_arena(const graph_step_input& in, int32_t bucket,
                                const graph_arena_layout& layout, const batch_plan_options& opt,
                                std::span<std::byte> staging, batch_plan* planned = nullptr);

}  // namespace coserve::gpu
