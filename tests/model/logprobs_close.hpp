// The correctness criterion the field uses to compare two implementations' greedy decoding (vLLM's
// check_logprobs_close), teacher-forced: both executors score the same prefixes (the reference's
// greedy tokens fed to both), and at each step
//   - the two argmaxes agree, or
//   - each side's argmax is among the other side's top-k (k = 5) logprobs; the comparison of that
//     prompt stops there (a near-tie flipped by rounding), and it passes;
//   - otherwise it fails at that step.
// The report also gives the largest |logit difference| of each step compared.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "model/executor.hpp"

namespace coserve::test {

struct close_report {
  bool ok = true;
  int32_t steps_compared = 0;
  int32_t diverged_at = -1;               // the step of an allowed divergence (-1: none)
  std::vector<float> max_abs_logit_diff;  // per step compared
  std::string why;                        // when !ok
};

inline std::vector<int32_t> top_k_ids(const std::vector<float>& row, size_t k) {
  std::vector<int32_t> idx(row.size());
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min(k, idx.size());
  std::partial_sort(
      idx.begin(), idx.begin() + std::ptrdiff_t(k), idx.end(), [&](int32_t x, int32_t y) {
        return row[size_t(x)] > row[size_t(y)] || (row[size_t(x)] == row[size_t(y)] && x < y);
      });
  idx.resize(k);
  return idx;
}

// a[step], b[step]: the raw logits of the same prefix from the two sides (log-softmax is monotone,
// so the top-k of logits is the top-k of logprobs).
inline close_report logprobs_close(const std::vector<std::vector<float>>& a,
                                   const std::vector<std::vector<float>>& b, size_t top_k = 5) {
  close_report r;
  for (size_t step = 0; step < std::min(a.size(), b.size()); ++step) {
    if (a[step].size() != b[step].size() || a[step].empty()) {
      r.ok = false;
      r.why = "step " + std::to_string(step) + ": rows of different sizes";
      return r;
    }
    float worst = 0.0f;
    for (size_t i = 0; i < a[step].size(); ++i)
      worst = std::max(worst, std::fabs(a[step][i] - b[step][i]));
    r.max_abs_logit_diff.push_back(worst);
    ++r.steps_compared;
    const auto ta = top_k_ids(a[step], top_k), tb = top_k_ids(b[step], top_k);
    if (ta[0] == tb[0]) continue;
    const bool a_in_b = std::find(tb.begin(), tb.end(), ta[0]) != tb.end();
    const bool b_in_a = std::find(ta.begin(), ta.end(), tb[0]) != ta.end();
    if (a_in_b && b_in_a) {
      r.diverged_at = int32_t(step);
      return r;
    }
    r.ok = false;
    r.why = "step " + std::to_string(step) + ": argmax " + std::to_string(ta[0]) + " vs " +
            std::to_string(tb[0]) + ", not in each other's top " + std::to_string(top_k);
    return r;
  }
  return r;
}

inline int32_t argmax_of(const std::vector<float>& row) {
  return int32_t(std::max_element(row.begin(), row.end()) - row.begin());
}

// One sequence's raw logits per step: prefills `prompt`, then feeds one explicit id per step (never
// k_token_from_last_step): forced[step] when given, else the argmax of the step before (greedy).
// rows.size() == 1 + tokens fed; tokens: what was fed. The executor must return logits.
struct logits_run {
  std::vector<std::vector<float>> rows;
  std::vector<int32_t> tokens;
};
inline logits_run run_logits(executor& ex, seq_id_t id, const std::vector<int32_t>& prompt,
                             const std::vector<int32_t>* forced, int32_t steps, int32_t block_size,
                             int32_t first_block = 0) {
  logits_run out;
  const int32_t total = int32_t(prompt.size()) + steps;
  std::vector<int32_t> table;
  for (int32_t b = 0; b < (total + block_size - 1) / block_size; ++b)
    table.push_back(first_block + b);
  step_plan p;
  p.step_id = 1;
  new_seq n;
  n.seq_id = id;
  n.prompt_ids = prompt;
  n.params.temperature = 0.0f;
  p.new_seqs.push_back(n);
  p.seqs.push_back(scheduled_seq{id, prompt, 0, table, true});
  for (int32_t step = 0; step <= steps; ++step) {
    auto r = ex.execute(p);
    if (!r.ok() || r->outputs.size() != 1) return {};
    out.rows.push_back(r->outputs[0].logits);
    if (step == steps) break;
    const int32_t next = forced ? (*forced)[size_t(step)] : argmax_of(out.rows.back());
    out.tokens.push_back(next);
    p = {};
    p.step_id = uint64_t(step + 2);
    p.seqs.push_back(scheduled_seq{id, {next}, int32_t(prompt.size()) + step, table, true});
  }
  step_plan end;
  end.finished = {id};
  (void)ex.execute(end);
  return out;
}

}  // namespace coserve::test
