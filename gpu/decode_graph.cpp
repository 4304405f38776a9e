#include "gpu/decode_graph.hpp"

#include <algorithm>
#include <cstring>
#include <string>

namespace coserve::gpu {

std::vector<int32_t> decode_graph_buckets(int32_t max_num_seqs) {
  std::vector<int32_t> b;
  for (int32_t s : {1, 2, 4})
    if (s <= max_num_seqs) b.push_back(s);
  for (int32_t s = 8; s <= max_num_seqs; s += 8) b.push_back(s);
  if (max_num_seqs >= 1 && b.back() != max_num_seqs) b.push_back(max_num_seqs);
  return b;
}

int32_t bucket_for(std::span<const int32_t> buckets, int32_t n) {
  if (n < 1) return 0;
  auto it = std::lower_bound(buckets.begin(), buckets.end(), n);
  return it == buckets.end() ? 0 : *it;
}

graph_arena_layout make_graph_arena_layout(int32_t rows, int32_t max_blocks_per_seq,
                                           int32_t max_work, int32_t max_merges) {
  graph_arena_layout l;
  l.rows = rows;
  l.max_blocks_per_seq = max_blocks_per_seq;
  l.max_work = max_work;
  l.max_merges = max_merges;
  size_t at = 0;
  auto take = [&at](size_t bytes) {
    const size_t off = at;
    at = (at + bytes + 15) & ~size_t(15);
    return off;
  };
  const size_t r = size_t(rows);
  l.ids = take(r * 4);
  l.positions = take(r * 4);
  l.slots = take(r * 4);
  l.cu_seqlens = take((r + 1) * 4);
  l.kv_lens = take(r * 4);
  l.bt_offsets = take((r + 1) * 4);
  l.sample_tokens = take(r * 4);
  l.params = take(r * sizeof(sample_row_params));
  l.row_slots = take(r * 4);
  l.counts = take(2 * 4);
  l.work = take(size_t(max_work) * sizeof(attn_work_item));
  l.merges = take(size_t(max_merges) * sizeof(attn_merge_item));
  l.block_tables = take(r * size_t(max_blocks_per_seq) * 4);
  l.bytes = at;
  return l;
}

graph_capacity decode_graph_capacity(int32_t rows, int32_t max_kv_len,
                                     const batch_plan_options& opt) {
  std::vector<scheduled_seq> seqs(size_t(std::max(rows, 0)));
  const int32_t blocks = (std::max(max_kv_len, 1) + opt.block_size - 1) / opt.block_size;
  for (scheduled_seq& s : seqs) {
    s.tokens = {0};
    s.start_pos = std::max(max_kv_len, 1) - 1;
    s.block_table.assign(size_t(blocks), 0);
    s.sample = true;
  }
  auto p = plan_batch(seqs, opt);
  if (!p) return {rows, rows};
  return {std::max<int32_t>(int32_t(p->work.size()), rows),
          std::max<int32_t>(int32_t(p->merges.size()), 1)};
}

namespace {

template <class T>
void put(std::span<std::byte> staging, size_t off, const std::vector<T>& v) {
  if (!v.empty()) std::memcpy(staging.data() + off, v.data(), v.size() * sizeof(T));
}

}  // namespace

result<size_t> fill_graph_arena(const graph_step_input& in, int32_t bucket,
                                const graph_arena_layout& layout, const batch_plan_options& opt,
                                std::span<std::byte> staging, batch_plan* planned) {
  const size_t n = in.seqs.size();
  if (bucket < int32_t(n) || bucket > layout.rows || n == 0)
    return make_error("invalid_argument", "graph arena: " + std::to_string(n) +
                                              " sequences for bucket " + std::to_string(bucket) +
                                              " of at most " + std::to_string(layout.rows));
  if (in.ids.size() != n || in.params.size() != n || in.row_slots.size() != n)
    return make_error("invalid_argument",
                      "graph arena: ids, params and row slots must have one entry per sequence");
  std::vector<scheduled_seq> seqs(in.seqs.begin(), in.seqs.end());
  for (const scheduled_seq& s : seqs)
    if (s.tokens.size() != 1 || !s.sample || s.num_draft != 0)
      return make_error("invalid_argument", "graph arena: sequence " + std::to_string(s.seq_id) +
                                                " is not a one-token sampled decode");
  // Padding rows: one token at position 0 over the scratch block.
  scheduled_seq pad;
  pad.tokens = {0};
  pad.start_pos = 0;
  pad.block_table = {in.pad_block};
  pad.sample = true;
  seqs.resize(size_t(bucket), pad);
  auto pl = plan_batch(seqs, opt);
  if (!pl) return std::move(pl).err();
  batch_plan& p = *pl;
  if (int32_t(p.work.size()) > layout.max_work || int32_t(p.merges.size()) > layout.max_merges)
    return make_error("invalid_argument",
                      "graph arena: the plan has more attention work than the graph's grid");
  if (p.block_tables.size() > size_t(layout.rows) * size_t(layout.max_blocks_per_seq))
    return make_error("invalid_argument", "graph arena: block tables exceed the arena");
  const size_t upload = layout.block_tables + p.block_tables.size() * 4;
  if (staging.size() < upload)
    return make_error("resource_exhausted", "graph arena: staging buffer too small");
  for (size_t i = n; i < size_t(bucket); ++i) p.slot_mapping[i] = -1;  // padding writes no KV
  std::vector<int32_t> ids(in.ids.begin(), in.ids.end()),
      row_slots(in.row_slots.begin(), in.row_slots.end());
  std::vector<sample_row_params> params(in.params.begin(), in.params.end());
  ids.resize(size_t(bucket), 0);
  row_slots.resize(size_t(bucket), in.pad_slot);
  params.resize(size_t(bucket), sample_row_params{0.0f, 1.0f, 0.0f, 0, 0, 0});
  const std::vector<int32_t> counts{int32_t(p.work.size()), int32_t(p.merges.size())};
  put(staging, layout.ids, ids);
  put(staging, layout.positions, p.positions);
  put(staging, layout.slots, p.slot_mapping);
  put(staging, layout.cu_seqlens, p.cu_seqlens_q);
  put(staging, layout.kv_lens, p.kv_lens);
  put(staging, layout.bt_offsets, p.block_table_offsets);
  put(staging, layout.sample_tokens, p.sample_tokens);
  put(staging, layout.params, params);
  put(staging, layout.row_slots, row_slots);
  put(staging, layout.counts, counts);
  put(staging, layout.work, p.work);
  put(staging, layout.merges, p.merges);
  put(staging, layout.block_tables, p.block_tables);
  if (planned) *planned = std::move(p);
  return upload;
}

}  // namespace coserve::gpu
