#include <catch2/catch.hpp>

#include "gpu/batch_plan.hpp"
#include "gpu/launch_params.hpp"

using namespace coserve;
using namespace coserve::gpu;

namespace {
scheduled_seq make_seq(seq_id_t id, int32_t n, int32_t start, std::vector<int32_t> blocks,
                       bool sample = true) {
  scheduled_seq s;
  s.seq_id = id;
  s.tokens.assign(size_t(n), 7);
  s.start_pos = start;
  s.block_table = std::move(blocks);
  s.sample = sample;
  return s;
}
}  // namespace

TEST_CASE("plan_batch: positions, slot mapping, cu_seqlens, flattened block tables",
          "[gpu_host][batch_plan]") {
  batch_plan_options opt;
  opt.block_size = 4;
  opt.num_kv_heads = 2;
  opt.gqa = 4;
  // prefill chunk of 6 tokens from 0 (blocks 9, 3), decode at position 5 (blocks 1, 8), chunk of 3
  // at 2
  std::vector<scheduled_seq> seqs{make_seq(1, 6, 0, {9, 3}, false), make_seq(2, 1, 5, {1, 8, 4}),
                                  make_seq(3, 3, 2, {5, 6})};
  auto r = plan_batch(seqs, opt);
  REQUIRE(r.ok());
  const batch_plan& p = *r;
  CHECK(p.num_tokens == 10);
  CHECK(p.num_seqs == 3);
  CHECK(p.cu_seqlens_q == std::vector<int32_t>{0, 6, 7, 10});
  CHECK(p.kv_lens == std::vector<int32_t>{6, 6, 5});
  CHECK(p.positions == std::vector<int32_t>{0, 1, 2, 3, 4, 5, 5, 2, 3, 4});
  CHECK(p.slot_mapping == std::vector<int32_t>{36, 37, 38, 39, 12, 13, 33, 22, 23, 24});
  // only the blocks covering kv_len are kept (seq 2 listed a third, unused block)
  CHECK(p.block_tables == std::vector<int32_t>{9, 3, 1, 8, 5, 6});
  CHECK(p.block_table_offsets == std::vector<int32_t>{0, 2, 4, 6});
  CHECK(p.sample_tokens == std::vector<int32_t>{6, 9});
  CHECK(p.sample_seqs == std::vector<int32_t>{1, 2});
  CHECK(p.merges.empty());
  // gqa 4 -> 4 query tokens per tile: seq 1 has 2 tiles, the others one each
  CHECK(p.q_tile == 4);
  REQUIRE(p.work.size() == 4);
  CHECK(p.work[0].q_begin == 0);
  CHECK(p.work[0].q_len == 4);
  CHECK(p.work[1].q_begin == 4);
  CHECK(p.work[1].q_len == 2);
  for (const auto& w : p.work) {
    CHECK(w.partial == -1);
    CHECK(w.kv_begin == 0);
    CHECK(w.kv_end == p.kv_lens[size_t(w.seq)]);
  }
}

TEST_CASE("plan_batch: rejects short block tables and empty slices", "[gpu_host][batch_plan]") {
  batch_plan_options opt;
  opt.block_size = 16;
  CHECK_FALSE(plan_batch({make_seq(1, 17, 0, {0})}, opt).ok());
  CHECK(plan_batch({make_seq(1, 16, 0, {0})}, opt).ok());
  CHECK_FALSE(plan_batch({make_seq(1, 0, 0, {0})}, opt).ok());
  CHECK_FALSE(plan_batch({make_seq(1, 1, -1, {0})}, opt).ok());
  batch_plan_options bad = opt;
  bad.block_size = 0;
  CHECK_FALSE(plan_batch({make_seq(1, 1, 0, {0})}, bad).ok());
}

TEST_CASE("plan_batch: a sequence verifying proposals samples its last 1 + num_draft positions",
          "[gpu_host][batch_plan]") {
  batch_plan_options opt;
  opt.block_size = 4;
  // decode (1 row), verify 3 proposals (4 rows), a prefill chunk that does not sample, verify 1
  auto verify3 = make_seq(2, 4, 6, {0, 1, 2});
  verify3.num_draft = 3;
  auto verify1 = make_seq(4, 2, 3, {5, 6});
  verify1.num_draft = 1;
  auto r = plan_batch(
      {make_seq(1, 1, 5, {3, 4}), verify3, make_seq(3, 5, 0, {7, 8}, false), verify1}, opt);
  REQUIRE(r.ok());
  CHECK(r->cu_seqlens_q == std::vector<int32_t>{0, 1, 5, 10, 12});
  CHECK(r->sample_tokens == std::vector<int32_t>{0, 1, 2, 3, 4, 10, 11});
  CHECK(r->sample_seqs == std::vector<int32_t>{0, 1, 1, 1, 1, 3, 3});
  CHECK(r->positions[1] == 6);  // the verified slice's rows score positions 6..9 in order
  // num_draft must leave one token of the slice that is not a proposal, and needs sampling
  auto all_drafts = make_seq(5, 2, 0, {0});
  all_drafts.num_draft = 2;
  CHECK_FALSE(plan_batch({all_drafts}, opt).ok());
  auto no_sample = make_seq(5, 3, 0, {0}, false);
  no_sample.num_draft = 1;
  CHECK_FALSE(plan_batch({no_sample}, opt).ok());
  auto negative = make_seq(5, 3, 0, {0});
  negative.num_draft = -1;
  CHECK_FALSE(plan_batch({negative}, opt).ok());
}

TEST_CASE("plan_batch: long decodes split over KV and every key is covered once",
          "[gpu_host][batch_plan]") {
  batch_plan_options opt;
  opt.block_size = 16;
  opt.num_kv_heads = 8;
  opt.gqa = 4;
  opt.num_sms = 132;
  for (int32_t kv_len : {100, 511, 512, 1000, 4097, 32768}) {
    std::vector<int32_t> blocks(size_t((kv_len + 15) / 16));
    for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = int32_t(i);
    auto r = plan_batch({make_seq(1, 1, kv_len - 1, blocks)}, opt);
    REQUIRE(r.ok());
    const batch_plan& p = *r;
    int32_t covered = 0;
    int32_t next = 0;
    for (const auto& w : p.work) {
      CHECK(w.kv_begin == next);
      CHECK(w.kv_begin % k_attn_kv_tile == 0);
      CHECK(w.kv_end > w.kv_begin);
      covered += w.kv_end - w.kv_begin;
      next = w.kv_end;
    }
    CHECK(covered == kv_len);
    if (kv_len < 2 * k_attn_min_split_kv) {
      CHECK(p.work.size() == 1);
      CHECK(p.merges.empty());
    } else {
      CHECK(p.work.size() > 1);
      REQUIRE(p.merges.size() == 1);
      CHECK(p.merges[0].num_splits == int32_t(p.work.size()));
      CHECK(p.num_partial_rows == int32_t(p.work.size()));
      for (size_t s = 0; s < p.work.size(); ++s)
        CHECK(p.work[s].partial == p.merges[0].partial + int32_t(s));
    }
  }
}

TEST_CASE("plan_batch: a batch that already fills the GPU is not split", "[gpu_host][batch_plan]") {
  batch_plan_options opt;
  opt.block_size = 16;
  opt.num_kv_heads = 8;
  opt.gqa = 4;
  opt.num_sms = 132;
  std::vector<int32_t> blocks(256);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = int32_t(i);
  std::vector<scheduled_seq> seqs;
  for (int i = 0; i < 64; ++i)
    seqs.push_back(make_seq(seq_id_t(i), 1, 4000, blocks));  // 64 * 8 = 512 blocks
  auto r = plan_batch(seqs, opt);
  REQUIRE(r.ok());
  CHECK(r->merges.empty());
  CHECK(r->work.size() == 64);
}
