// Prompt logprobs through any executor that returns raw logits (return_logits): a 40-token prompt
// scored in one chunk and in chunks of 16, 16 and 8 beside a decoding sequence, against the
// executor's own next-token logits after each prefix. Used by the CPU executor's tests and by the
// CUDA executor's (tests/gpu/test_gpu_executor.cpp).
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

#include "model/executor.hpp"

namespace coserve::test {

// Greedy tokens of `prompt`, prefilled in one step then decoded with k_token_from_last_step; the
// sequence is dropped afterwards.
inline std::vector<int32_t> greedy_tokens(executor& ex, seq_id_t id,
                                          const std::vector<int32_t>& prompt, int n,
                                          std::vector<int32_t> table) {
  step_plan plan;
  new_seq ns;
  ns.seq_id = id;
  ns.prompt_ids = prompt;
  ns.params.temperature = 0.0f;
  plan.new_seqs.push_back(ns);
  plan.seqs.push_back({id, prompt, 0, std::move(table), true});
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    auto r = ex.execute(plan);
    REQUIRE(r.ok());
    REQUIRE(r->outputs.size() == 1);
    out.push_back(r->outputs[0].token);
    plan.new_seqs.clear();
    plan.seqs[0].start_pos += int32_t(plan.seqs[0].tokens.size());
    plan.seqs[0].tokens = {k_token_from_last_step};
  }
  plan.seqs.clear();
  plan.finished = {id};
  REQUIRE(ex.execute(plan).ok());
  return out;
}

// Blocks 0-5, 10 and 11 of 16 tokens are used. `margin`: the logprob tolerance against the
// next-token logits (which the executor may compute with another GEMM shape).
inline void prompt_logprobs_case(executor& ex, int32_t vocab, double margin) {
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 40; ++i) prompt.push_back((i * 37 + 5) % vocab);
  auto greedy = [](seq_id_t id, const std::vector<int32_t>& p) {
    new_seq n;
    n.seq_id = id;
    n.prompt_ids = p;
    n.params.temperature = 0.0f;
    return n;
  };

  // Reference: the raw logits after each prefix, from a sampled prefill of that prefix.
  std::vector<std::vector<float>> ref;
  for (size_t p = 1; p < prompt.size(); ++p) {
    step_plan plan;
    const std::vector<int32_t> prefix(prompt.begin(), prompt.begin() + std::ptrdiff_t(p));
    plan.new_seqs.push_back(greedy(100 + p, prefix));
    plan.seqs.push_back({100 + p, prefix, 0, {0, 1, 2}, true});
    plan.finished = {100 + p};
    auto r = ex.execute(plan);
    REQUIRE(r.ok());
    REQUIRE_FALSE(r->outputs.at(0).logits.empty());
    ref.push_back(r->outputs.at(0).logits);
  }
  auto check = [&](const std::vector<prompt_logprob>& got) {
    REQUIRE(got.size() == prompt.size() - 1);
    for (size_t p = 0; p < got.size(); ++p) {
      const auto& lg = ref[p];
      const int32_t tok = prompt[p + 1];
      double lse = 0, mx = *std::max_element(lg.begin(), lg.end());
      for (float v : lg) lse += std::exp(double(v) - mx);
      lse = mx + std::log(lse);
      INFO("position " << p);
      CHECK(got[p].token == tok);
      CHECK(got[p].logprob == Approx(lg[size_t(tok)] - lse).margin(margin));
      if (margin <= 1e-4)  // the same logits: the same rank
        CHECK(got[p].rank == 1 + std::count_if(lg.begin(), lg.end(),
                                               [&](float v) { return v > lg[size_t(tok)]; }));
      REQUIRE(got[p].top.size() == 3);
      CHECK(lg[size_t(got[p].top[0].token)] >=
            *std::max_element(lg.begin(), lg.end()) - float(margin));
      CHECK(got[p].top[0].logprob >= got[p].top[1].logprob);
      CHECK(got[p].top[1].logprob >= got[p].top[2].logprob);
    }
  };

  new_seq ns = greedy(1, prompt);
  ns.params.prompt_logprobs = 3;
  {  // one chunk
    step_plan plan;
    plan.new_seqs.push_back(ns);
    plan.seqs.push_back({1, prompt, 0, {0, 1, 2}, true});
    plan.finished = {1};
    auto r = ex.execute(plan);
    REQUIRE(r.ok());
    check(r->outputs.at(0).prompt_logprobs);
  }
  // Chunks of 16, 16 and 8, beside a decoding sequence whose token must not change.
  const std::vector<int32_t> other{9, 8, 7, 6, 5};
  const auto solo = greedy_tokens(ex, 50, other, 4, {10});
  step_plan plan;
  ns.seq_id = 2;
  plan.new_seqs = {ns, greedy(3, other)};
  plan.seqs.push_back({3, other, 0, {11}, true});
  plan.seqs.push_back(
      {2, std::vector<int32_t>(prompt.begin(), prompt.begin() + 16), 0, {0, 1, 2}, false});
  std::vector<int32_t> others;
  std::vector<prompt_logprob> got;
  for (int32_t chunk = 0; chunk < 3; ++chunk) {
    auto r = ex.execute(plan);
    REQUIRE(r.ok());
    for (const auto& o : r->outputs) {
      if (o.seq_id == 3)
        others.push_back(o.token);
      else
        got = o.prompt_logprobs;
      if (o.seq_id == 3) CHECK(o.prompt_logprobs.empty());
    }
    plan.new_seqs.clear();
    plan.seqs[0].start_pos += int32_t(plan.seqs[0].tokens.size());
    plan.seqs[0].tokens = {k_token_from_last_step};
    const int32_t at = 16 * (chunk + 1);
    const int32_t len = chunk == 0 ? 16 : 8;
    plan.seqs[1] = {2,
                    std::vector<int32_t>(prompt.begin() + at, prompt.begin() + at + len),
                    at,
                    {0, 1, 2},
                    chunk == 1};
  }
  check(got);
  CHECK(others == std::vector<int32_t>(solo.begin(), solo.begin() + 3));
  // Registered again with output (after a preemption): the prompt's entries were handed out.
  step_plan again;
  new_seq back = ns;
  back.seq_id = 4;
  back.output_ids = {1};
  again.new_seqs.push_back(back);
  again.seqs.push_back({4, {prompt.begin(), prompt.end()}, 0, {3, 4, 5}, true});
  auto r = ex.execute(again);
  REQUIRE(r.ok());
  CHECK(r->outputs.at(0).prompt_logprobs.empty());
  step_plan drop;
  drop.finished = {2, 3, 4};
  REQUIRE(ex.execute(drop).ok());
}

}  // namespace coserve::test
