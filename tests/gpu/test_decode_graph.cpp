// Host side of the decode CUDA graphs (gpu/decode_graph.hpp): buckets, the fixed metadata arena and
// the padded batch written into it. The padded plan must give every real row exactly what the
// unpadded plan gives it, padding rows must write no KV, and every address stays inside the layout.
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "gpu/decode_graph.hpp"

using namespace coserve;
using namespace coserve::gpu;

namespace {

template <class T>
std::vector<T> read(const std::vector<std::byte>& staging, size_t off, size_t n) {
  std::vector<T> v(n);
  std::memcpy(v.data(), staging.data() + off, n * sizeof(T));
  return v;
}

scheduled_seq decode(seq_id_t id, int32_t pos, std::vector<int32_t> blocks) {
  scheduled_seq s;
  s.seq_id = id;
  s.tokens = {k_token_from_last_step};
  s.start_pos = pos;
  s.block_table = std::move(blocks);
  s.sample = true;
  return s;
}

}  // namespace

TEST_CASE("decode graph buckets: 1, 2, 4, 8, multiples of 8, and max_num_seqs",
          "[gpu_host][graph]") {
  CHECK(decode_graph_buckets(1) == std::vector<int32_t>{1});
  CHECK(decode_graph_buckets(3) == std::vector<int32_t>{1, 2, 3});
  CHECK(decode_graph_buckets(8) == std::vector<int32_t>{1, 2, 4, 8});
  CHECK(decode_graph_buckets(20) == std::vector<int32_t>{1, 2, 4, 8, 16, 20});
  const auto b = decode_graph_buckets(256);
  CHECK(b.size() == 3 + 32);
  CHECK(b.back() == 256);
  CHECK(bucket_for(b, 1) == 1);
  CHECK(bucket_for(b, 3) == 4);
  CHECK(bucket_for(b, 9) == 16);
  CHECK(bucket_for(b, 256) == 256);
  CHECK(bucket_for(b, 257) == 0);
  CHECK(bucket_for(b, 0) == 0);
}

TEST_CASE("decode graph arena: aligned, disjoint, block tables last", "[gpu_host][graph]") {
  const auto l = make_graph_arena_layout(24, 32, 300, 24);
  const std::vector<std::pair<size_t, size_t>> parts{{l.ids, 24 * 4},
                                                     {l.positions, 24 * 4},
                                                     {l.slots, 24 * 4},
                                                     {l.cu_seqlens, 25 * 4},
                                                     {l.kv_lens, 24 * 4},
                                                     {l.bt_offsets, 25 * 4},
                                                     {l.sample_tokens, 24 * 4},
                                                     {l.params, 24 * sizeof(sample_row_params)},
                                                     {l.row_slots, 24 * 4},
                                                     {l.counts, 8},
                                                     {l.work, 300 * sizeof(attn_work_item)},
                                                     {l.merges, 24 * sizeof(attn_merge_item)},
                                                     {l.block_tables, 24 * 32 * 4}};
  for (size_t i = 0; i < parts.size(); ++i) {
    CAPTURE(i);
    CHECK(parts[i].first % 16 == 0);
    CHECK(parts[i].first + parts[i].second <= l.bytes);
    if (i + 1 < parts.size()) CHECK(parts[i].first + parts[i].second <= parts[i + 1].first);
  }
  CHECK(l.block_tables + 24 * 32 * 4 <= l.bytes);
}

TEST_CASE(
    "decode graph arena: a batch padded to its bucket keeps each real row's plan, padding writes "
    "no KV",
    "[gpu_host][graph]") {
  batch_plan_options opt{16, 2, 4, 132, 32};
  const int32_t bucket = 8, max_len = 4096;
  const auto cap = decode_graph_capacity(bucket, max_len, opt);
  CHECK(cap.max_work >= bucket);
  const auto layout = make_graph_arena_layout(bucket, max_len / 16, cap.max_work, cap.max_merges);
  // Three decodes: short, one that splits (long context), one on a block boundary.
  std::vector<scheduled_seq> seqs{decode(1, 5, {3}), decode(2, 2000, {}), decode(3, 16, {7, 9})};
  for (int32_t b = 0; b < 126; ++b) seqs[1].block_table.push_back(10 + b);
  const std::vector<int32_t> ids{-4, 17, -9};  // references to slots 3 and 8, a literal id
  const std::vector<sample_row_params> params(3, sample_row_params{0.7f, 0.9f, 0.0f, 20, 11, 4});
  const std::vector<int32_t> row_slots{3, 5, 8};
  std::vector<std::byte> staging(layout.bytes);
  graph_step_input in{seqs, ids, params, row_slots, /*pad_block=*/500, /*pad_slot=*/99};
  auto up = fill_graph_arena(in, bucket, layout, opt, staging);
  REQUIRE(up.ok());
  CHECK(*up <= layout.bytes);

  auto alone = plan_batch(seqs, opt);
  REQUIRE(alone.ok());
  const auto counts = read<int32_t>(staging, layout.counts, 2);
  REQUIRE(counts[0] <= layout.max_work);
  REQUIRE(counts[1] <= layout.max_merges);
  const auto work = read<attn_work_item>(staging, layout.work, size_t(counts[0]));
  const auto merges = read<attn_merge_item>(staging, layout.merges, size_t(counts[1]));
  // Each real row's keys are covered exactly once, in order, by its work items; only the long
  // context is split (one merge); padding rows attend over one key.
  const std::vector<int32_t> kv_len{6, 2001, 17};
  for (int32_t i = 0; i < bucket; ++i) {
    CAPTURE(i);
    int32_t next = 0, items = 0;
    for (const attn_work_item& w : work)
      if (w.seq == i) {
        CHECK(w.kv_begin == next);
        next = w.kv_end;
        ++items;
      }
    CHECK(next == (i < 3 ? kv_len[size_t(i)] : 1));
    if (i != 1)
      CHECK(items == 1);
    else
      CHECK(items > 1);
  }
  REQUIRE(counts[1] == 1);
  CHECK(merges[0].token == 1);
  const auto slots = read<int32_t>(staging, layout.slots, size_t(bucket));
  const auto positions = read<int32_t>(staging, layout.positions, size_t(bucket));
  for (size_t i = 0; i < 3; ++i) {
    CHECK(slots[i] == alone->slot_mapping[i]);
    CHECK(positions[i] == alone->positions[i]);
  }
  for (size_t i = 3; i < size_t(bucket); ++i) {
    CHECK(slots[i] == -1);
    CHECK(positions[i] == 0);
  }
  const auto got_ids = read<int32_t>(staging, layout.ids, size_t(bucket));
  CHECK(std::vector<int32_t>(got_ids.begin(), got_ids.begin() + 3) == ids);
  CHECK(got_ids[7] == 0);
  const auto got_slots = read<int32_t>(staging, layout.row_slots, size_t(bucket));
  CHECK(got_slots[1] == 5);
  CHECK(got_slots[6] == 99);
  const auto got_params = read<sample_row_params>(staging, layout.params, size_t(bucket));
  CHECK(got_params[2].top_k == 20);
  CHECK(got_params[5].temperature == 0.0f);  // padding samples greedily
  const auto kv = read<int32_t>(staging, layout.kv_lens, size_t(bucket));
  CHECK(kv[1] == 2001);
  CHECK(kv[4] == 1);
  const auto bto = read<int32_t>(staging, layout.bt_offsets, size_t(bucket) + 1);
  const auto bt = read<int32_t>(staging, layout.block_tables, size_t(bto.back()));
  CHECK(bt[size_t(bto[4])] == 500);  // padding attends over the scratch block
  CHECK(*up == layout.block_tables + size_t(bto.back()) * 4);
  const auto samples = read<int32_t>(staging, layout.sample_tokens, size_t(bucket));
  for (int32_t i = 0; i < bucket; ++i) CHECK(samples[size_t(i)] == i);
}

TEST_CASE("decode graph arena: what a graph cannot replay is refused", "[gpu_host][graph]") {
  batch_plan_options opt{16, 2, 4, 132, 32};
  const auto cap = decode_graph_capacity(4, 1024, opt);
  const auto layout = make_graph_arena_layout(4, 64, cap.max_work, cap.max_merges);
  std::vector<std::byte> staging(layout.bytes);
  std::vector<scheduled_seq> seqs{decode(1, 5, {3}), decode(2, 6, {4})};
  const std::vector<int32_t> ids{1, 2}, slots{0, 1};
  const std::vector<sample_row_params> params(2, sample_row_params{0.0f, 1.0f, 0.0f, 0, 0, 0});
  graph_step_input in{seqs, ids, params, slots, 63, 7};
  CHECK(fill_graph_arena(in, 4, layout, opt, staging).ok());
  CHECK_FALSE(
      fill_graph_arena(in, 1, layout, opt, staging).ok());  // more sequences than the bucket
  CHECK_FALSE(fill_graph_arena(in, 8, layout, opt, staging).ok());  // a bucket beyond the arena
  std::vector<std::byte> small(16);
  CHECK_FALSE(fill_graph_arena(in, 4, layout, opt, small).ok());
  seqs[1].tokens = {1, 2};  // a prefill chunk: eager
  CHECK_FALSE(
      fill_graph_arena(graph_step_input{seqs, ids, params, slots, 63, 7}, 4, layout, opt, staging)
          .ok());
  seqs[1].tokens = {1};
  seqs[1].sample = false;
  CHECK_FALSE(
      fill_graph_arena(graph_step_input{seqs, ids, params, slots, 63, 7}, 4, layout, opt, staging)
          .ok());
}
