// Drives any executor through speculative verification steps: prompts prefilled in one step, then
// decode steps in which each sequence's slice is its last token followed by proposals
// (scheduled_seq::num_draft). The proposals come from a reference continuation, some of them
// corrupted, so that whatever the executor accepts, its outputs must equal the reference's.
// Used by the CPU executor's tests and by the CUDA executor's (tests/gpu/test_gpu_executor.cpp).
#pragma once

#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <vector>

#include "model/executor.hpp"

namespace coserve::test {

struct verify_run {
  std::vector<std::vector<int32_t>> tokens;  // per prompt, the first `steps` generated ids
  std::vector<std::vector<size_t>>
      top_counts;  // per prompt and token, the top logprobs it came with
  int64_t proposed = 0, accepted = 0, verify_rows = 0;
};

// Generates `steps` tokens for each prompt with execute(). `reference` empty: no proposals (plain
// decoding). Otherwise, per sequence and step, up to k_max proposals taken from reference[i] at the
// sequence's next output index; one in three proposal runs has one token replaced by another id,
// so it must be rejected there. from_draft: instead, every step asks for up to k_max proposals from
// the executor's draft model (k_token_from_draft), as many as the sequence still needs. Sequence i
// has id first_id + i and seed 11 + i.
inline verify_run drive_verify(executor& ex, const std::vector<std::vector<int32_t>>& prompts,
                               int32_t steps, int32_t block_size,
                               const std::vector<sampling_params>& params,
                               const std::vector<std::vector<int32_t>>& reference, int32_t k_max,
                               int32_t vocab, uint32_t seed, seq_id_t first_id = 1,
                               bool from_draft = false) {
  verify_run r;
  const size_t n = prompts.size();
  r.tokens.resize(n);
  r.top_counts.resize(n);
  std::vector<std::vector<int32_t>> tables(n);
  int32_t next_block = 0;
  for (size_t i = 0; i < n; ++i) {
    const int32_t max_len = int32_t(prompts[i].size()) + steps + k_max + 1;
    for (int32_t b = 0; b < (max_len + block_size - 1) / block_size; ++b)
      tables[i].push_back(next_block++);
  }
  std::mt19937 rng(seed);
  step_plan p;
  p.step_id = 1;
  for (size_t i = 0; i < n; ++i) {
    new_seq ns;
    ns.seq_id = first_id + i;
    ns.prompt_ids = prompts[i];
    ns.params = params[i % params.size()];
    ns.seed = 11 + i;
    p.new_seqs.push_back(ns);
    scheduled_seq s;
    s.seq_id = first_id + i;
    s.tokens = prompts[i];
    s.block_table = tables[i];
    s.sample = true;
    p.seqs.push_back(s);
  }
  std::vector<int32_t> expect_drafts(n, 0);
  for (;;) {
    auto res = ex.execute(p);
    REQUIRE(res.ok());
    // Each sequence's outputs are consecutive: 1 + the proposals accepted.
    std::vector<int32_t> got(n, 0);
    for (const seq_output& o : res->outputs) {
      const size_t i = size_t(o.seq_id - first_id);
      REQUIRE(i < n);
      r.tokens[i].push_back(o.token);
      r.top_counts[i].push_back(o.top_logprobs.size());
      ++got[i];
    }
    for (size_t i = 0; i < p.seqs.size(); ++i) {
      const size_t k = size_t(p.seqs[i].seq_id - first_id);
      REQUIRE(got[k] >= 1);
      REQUIRE(got[k] <= 1 + p.seqs[i].num_draft);
      r.accepted += got[k] - 1;
    }
    // The next step: every sequence short of `steps`, with proposals.
    step_plan next;
    next.step_id = p.step_id + 1;
    for (size_t i = 0; i < n; ++i) {
      if (int32_t(r.tokens[i].size()) >= steps) continue;
      scheduled_seq s;
      s.seq_id = first_id + i;
      s.start_pos = int32_t(prompts[i].size() + r.tokens[i].size()) - 1;
      s.tokens = {r.tokens[i].back()};
      s.block_table = tables[i];
      s.sample = true;
      if (from_draft) {
        const int32_t k = std::min<int32_t>(k_max, steps - int32_t(r.tokens[i].size()));
        s.tokens.insert(s.tokens.end(), size_t(std::max(k, 0)), k_token_from_draft);
        s.num_draft = std::max(k, 0);
        r.proposed += s.num_draft;
        r.verify_rows += k > 0 ? 1 + k : 0;
      } else if (!reference.empty()) {
        const size_t at = r.tokens[i].size();  // the output index the first proposal predicts
        const int32_t room = int32_t(reference[i].size()) - int32_t(at);
        const int32_t k = std::min<int32_t>(int32_t(rng() % uint32_t(k_max + 1)), room);
        for (int32_t j = 0; j < k; ++j) s.tokens.push_back(reference[i][at + size_t(j)]);
        if (k > 0 && rng() % 3 == 0) {
          const size_t bad = 1 + rng() % uint32_t(k);
          s.tokens[bad] = (s.tokens[bad] + 1 + int32_t(rng() % uint32_t(vocab - 1))) % vocab;
        }
        s.num_draft = k;
        r.proposed += k;
        r.verify_rows += k > 0 ? 1 + k : 0;
      }
      next.seqs.push_back(std::move(s));
    }
    if (next.seqs.empty()) break;
    p = std::move(next);
  }
  step_plan done;
  done.step_id = p.step_id + 1;
  for (size_t i = 0; i < n; ++i) {
    done.finished.push_back(first_id + i);
    r.tokens[i].resize(size_t(steps));
    r.top_counts[i].resize(size_t(steps));
  }
  REQUIRE(ex.execute(done).ok());
  return r;
}

}  // namespace coserve::test
