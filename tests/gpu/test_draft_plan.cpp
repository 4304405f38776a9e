// The CUDA executor's draft-model passes, planned on the host (gpu/draft_plan.hpp): what each pass
// computes, where its proposals go, and how the draft's cache catches up.
#include <catch2/catch.hpp>
#include <numeric>

#include "gpu/draft_plan.hpp"

using namespace coserve;
using gpu::draft_step;

namespace {

scheduled_seq seq(seq_id_t id, std::vector<int32_t> tokens, int32_t start,
                  std::vector<int32_t> table, bool sample, int32_t num_draft = 0) {
  scheduled_seq s;
  s.seq_id = id;
  s.tokens = std::move(tokens);
  s.start_pos = start;
  s.block_table = std::move(table);
  s.sample = sample;
  s.num_draft = num_draft;
  return s;
}

}  // namespace

TEST_CASE(
    "plan_draft: catch-up from the draft's valid prefix, then one pass per proposal, picks into "
    "slots",
    "[gpu_host][draft]") {
  const int32_t D = k_token_from_draft;
  draft_kv_map map(16, 4);
  // Sequence 1 had positions 0..5 computed by the model (tokens 100..105), the draft only 0..3.
  const std::vector<int32_t> t1{0, 1};
  std::vector<int32_t> prompt1(6);
  std::iota(prompt1.begin(), prompt1.end(), 100);
  map.note_draft(1, t1, 0, prompt1.data(), 4);
  map.note_model(1, t1, 0, prompt1.data(), 6);
  REQUIRE(map.valid_prefix(t1, 6) == 4);
  // Sequence 4: positions 0..2 computed by the model only.
  const std::vector<int32_t> t4{6, 7}, prompt4{40, 41, 42};
  map.note_model(4, t4, 0, prompt4.data(), 3);

  step_plan plan;
  plan.seqs.push_back(seq(1, {106, D, D, D}, 6, t1, true, 3));  // proposes 3
  plan.seqs.push_back(seq(2, {7}, 9, {2, 3, 4}, true));         // a plain decode: no draft work
  plan.seqs.push_back(seq(3, {50, 51, 52}, 0, {5}, false));     // a prompt chunk: warms the draft
  plan.seqs.push_back(seq(4, {60, D}, 3, t4, true, 1));         // proposes 1
  std::vector<std::vector<int32_t>> inputs;
  for (const auto& s : plan.seqs) inputs.push_back(s.tokens.to_vector());

  auto r = gpu::plan_draft(plan, inputs, map, 100, 4, 64);
  REQUIRE(r.ok());
  const draft_step& st = *r;
  REQUIRE(st.proposers.size() == 2);
  CHECK(st.proposers[0].seq == 0);
  CHECK(st.proposers[0].first == 1);
  CHECK(st.proposers[0].count == 3);
  CHECK(st.proposers[0].slot0 == 100);
  CHECK(st.proposers[1].seq == 3);
  CHECK(st.proposers[1].slot0 == 104);
  // pass 0 + passes for proposals 0..2 of the longest proposer.
  REQUIRE(st.passes.size() == 4);
  const auto& p0 = st.passes[0];
  REQUIRE(p0.seqs.size() == 3);
  // Sequence 1: positions 4, 5 from the map, then its input before the proposals.
  CHECK(p0.seqs[0].start_pos == 4);
  CHECK(p0.seqs[0].tokens == std::vector<int32_t>{104, 105, 106});
  CHECK(p0.seqs[0].sample);
  // Sequence 3: its chunk, no pick.
  CHECK(p0.seqs[1].seq_id == 3);
  CHECK(p0.seqs[1].start_pos == 0);
  CHECK(p0.seqs[1].tokens == std::vector<int32_t>{50, 51, 52});
  CHECK_FALSE(p0.seqs[1].sample);
  // Sequence 4: the draft never computed positions 0..2: their tokens as the model computed them.
  CHECK(p0.seqs[2].start_pos == 0);
  CHECK(p0.seqs[2].tokens == std::vector<int32_t>{40, 41, 42, 60});
  CHECK(p0.out_slots == std::vector<int32_t>{100, 104});
  // Pass 1: proposal 0 of both into the cache; sequence 1's logits give its proposal 1, sequence
  // 4's last pass only completes its cache.
  const auto& p1 = st.passes[1];
  REQUIRE(p1.seqs.size() == 2);
  CHECK(p1.seqs[0].tokens == std::vector<int32_t>{-(100 + 1)});
  CHECK(p1.seqs[0].start_pos == 7);
  CHECK(p1.seqs[0].sample);
  CHECK(p1.seqs[1].tokens == std::vector<int32_t>{-(104 + 1)});
  CHECK(p1.seqs[1].start_pos == 4);
  CHECK_FALSE(p1.seqs[1].sample);
  CHECK(p1.out_slots == std::vector<int32_t>{101});
  CHECK(st.passes[2].seqs.size() == 1);
  CHECK(st.passes[2].out_slots == std::vector<int32_t>{102});
  CHECK(st.passes[3].seqs.size() == 1);
  CHECK(st.passes[3].seqs[0].start_pos == 9);
  CHECK(st.passes[3].seqs[0].tokens == std::vector<int32_t>{-(102 + 1)});
  CHECK(st.passes[3].out_slots.empty());
  // What pass 0 computed, for the map.
  REQUIRE(st.first.size() == 3);
  CHECK(st.first[0].start == 4);
  CHECK(st.first[0].tokens == std::vector<int32_t>{104, 105, 106});
}

TEST_CASE("plan_draft: pass 0 split at the token budget keeps each sequence's chunks in order",
          "[gpu_host][draft]") {
  const int32_t D = k_token_from_draft;
  draft_kv_map map(16, 4);
  step_plan plan;
  std::vector<int32_t> long_prompt(10);
  std::iota(long_prompt.begin(), long_prompt.end(), 1);
  plan.seqs.push_back(seq(1, long_prompt, 0, {0, 1, 2}, false));
  plan.seqs.push_back(seq(2, {5, 6, 7, D, D}, 0, {3, 4}, true, 2));
  std::vector<std::vector<int32_t>> inputs;
  for (const auto& s : plan.seqs) inputs.push_back(s.tokens.to_vector());
  auto r = gpu::plan_draft(plan, inputs, map, 0, 2, 4);
  REQUIRE(r.ok());
  // 13 tokens of pass 0 over passes of 4: [1:0-3] [1:4-7] [1:8-9, 2:0-1] [2:2], then 2 proposal
  // passes.
  REQUIRE(r->passes.size() == 6);
  int32_t budget_ok = 0, pos1 = 0, pos2 = 0;
  for (size_t p = 0; p < 4; ++p) {
    int32_t n = 0;
    for (const auto& s : r->passes[p].seqs) {
      n += int32_t(s.tokens.size());
      int32_t& next = s.seq_id == 1 ? pos1 : pos2;
      CHECK(s.start_pos == next);  // in order, no gap
      next += int32_t(s.tokens.size());
      CHECK(s.sample == (s.seq_id == 2 && next == 3));
    }
    budget_ok += n <= 4;
  }
  CHECK(budget_ok == 4);
  CHECK(pos1 == 10);
  CHECK(pos2 == 3);
  CHECK(r->passes[3].out_slots == std::vector<int32_t>{0});
  CHECK(r->passes[4].out_slots == std::vector<int32_t>{1});
  CHECK(r->passes[5].out_slots.empty());
}

TEST_CASE("plan_draft: proposals that are not a sequence's last num_draft tokens are refused",
          "[gpu_host][draft]") {
  const int32_t D = k_token_from_draft;
  draft_kv_map map(4, 4);
  step_plan plan;
  plan.seqs.push_back(seq(1, {5, D, 6}, 0, {0}, true, 1));
  std::vector<std::vector<int32_t>> inputs{plan.seqs[0].tokens.to_vector()};
  CHECK_FALSE(gpu::plan_draft(plan, inputs, map, 0, 4, 64).ok());
  plan.seqs[0] = seq(1, {5, D, D}, 0, {0}, true, 2);
  inputs = {plan.seqs[0].tokens.to_vector()};
  CHECK_FALSE(gpu::plan_draft(plan, inputs, map, 0, 1, 64).ok());  // more than k
  CHECK(gpu::plan_draft(plan, inputs, map, 0, 2, 64).ok());
  // A position before this step whose token was never recorded cannot be caught up.
  plan.seqs[0] = seq(1, {5, D}, 2, {0}, true, 1);
  inputs = {plan.seqs[0].tokens.to_vector()};
  CHECK_FALSE(gpu::plan_draft(plan, inputs, map, 0, 2, 64).ok());
}
