// The CPU executor's draft model: its share of a step under speculative decoding
// (cpu_executor::run_draft; the step itself is in cpu_executor.cpp).
#include <algorithm>
#include <span>
#include <vector>

#include "model/cpu_executor.hpp"

namespace coserve {

result<void> cpu_executor::run_draft(const std::vector<forward_seq>& batch,
                                     std::vector<std::vector<int32_t>>& inputs,
                                     const step_plan& plan) {
  draft_model& dm = *draft_;
  // 1. For each sequence the draft proposes for, or whose prompt is being computed: the positions
  //    its cache lacks before this step's tokens (from the tokens recorded there), then this step's
  //    tokens up to the first proposal, with the draft's logits at that point for proposing ones.
  std::vector<forward_seq> first;
  std::vector<std::vector<int32_t>> caught_up(batch.size());
  std::vector<size_t> computed;                        // batch indices of `first`, in order
  std::vector<size_t> proposing;                       // batch indices, in order
  std::vector<int32_t> proposal_at(batch.size(), -1);  // index into inputs[i] of the first proposal
  for (size_t i = 0; i < batch.size(); ++i) {
    const scheduled_seq& s = plan.seqs[i];
    int32_t n = batch[i].num_tokens;
    if (s.num_draft > 0 && inputs[i][size_t(n - s.num_draft)] == k_token_from_draft) {
      n -= s.num_draft;
      proposal_at[i] = n;
      proposing.push_back(i);
    } else if (n == 1) {
      continue;  // a plain decode step
    }
    const int32_t from = dm.map.valid_prefix(s.block_table, s.start_pos);
    std::vector<int32_t>& toks = caught_up[i];
    for (int32_t p = from; p < s.start_pos; ++p) toks.push_back(dm.map.token_at(s.block_table, p));
    toks.insert(toks.end(), inputs[i].begin(), inputs[i].begin() + n);
    first.push_back(forward_seq{toks.data(), int32_t(toks.size()), from, &s.block_table,
                                proposal_at[i] >= 0, 1});
    computed.push_back(i);
  }
  if (first.empty()) return {};
  if (auto r = dm.forward.run(first, dm.cache, false, dm.logits); !r) return r;
  for (size_t c = 0; c < computed.size(); ++c) {
    const size_t i = computed[c];
    dm.map.note_draft(plan.seqs[i].seq_id, plan.seqs[i].block_table, first[c].start_pos,
                      first[c].tokens, first[c].num_tokens);
  }
  // 2. Proposal j of each sequence: the argmax of the draft's last logits, then computed into the
  //    draft's cache (its logits give proposal j + 1).
  const size_t vocab = size_t(dm.weights.config.vocab_size);
  for (int32_t j = 0; !proposing.empty(); ++j) {
    std::vector<forward_seq> step;
    std::vector<size_t> next;
    for (size_t r = 0; r < proposing.size(); ++r) {
      const size_t i = proposing[r];
      const float* l = dm.logits.data() + r * vocab;
      // Greedy requests take the draft's argmax; sampled ones draw from the draft's distribution
      // (kept for the acceptance rule).
      seq_state& st = seqs_.at(plan.seqs[i].seq_id);
      int32_t tok = 0;
      if (st.sampling.params.greedy()) {
        tok = int32_t(std::max_element(l, l + vocab) - l);
      } else {
        auto& qs = draft_q_[plan.seqs[i].seq_id];
        if (j == 0) qs.clear();
        qs.emplace_back();
        seq_rng rng(sampling_state::draft_seed(st.sampling.seed, st.sampling.num_output + j));
        tok = draft_sample(std::span<const float>(l, vocab), st.sampling.params, rng, qs.back());
      }
      const size_t at = size_t(proposal_at[i] + j);
      inputs[i][at] = tok;
      const bool more = j + 1 < plan.seqs[i].num_draft;
      step.push_back(forward_seq{inputs[i].data() + at, 1, plan.seqs[i].start_pos + int32_t(at),
                                 &plan.seqs[i].block_table, more, 1});
      if (more) next.push_back(i);
    }
    // Computing the last proposal too keeps the draft's cache whole when all of them are accepted.
    if (auto r = dm.forward.run(step, dm.cache, false, dm.logits); !r) return r;
    for (size_t r = 0; r < step.size(); ++r) {
      const scheduled_seq& s = plan.seqs[proposing[r]];
      dm.map.note_draft(s.seq_id, s.block_table, step[r].start_pos, step[r].tokens, 1);
    }
    proposing = std::move(next);
  }
  return {};
}

}  // namespace coserve
