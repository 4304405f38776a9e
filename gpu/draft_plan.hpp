// Host planning of the CUDA executor's draft-model passes (speculative decoding with
// {"model": DIR, "num_speculative_tokens": k}). The proposals never come back to the host before
// the model verifies them: each draft pass ends with a greedy pick on the device written into the
// last-token buffer at a proposal slot, the next pass (and the model's forward) read it from there
// as an input id -(slot + 1), and the host learns the proposals with the step's outputs.
//
// Per step, as the CPU executor's draft does (model/cpu_executor_draft.cpp):
//   pass 0: every sequence that proposes, or computes more than one token (a prompt chunk): the
//           positions the draft's cache lacks before this step's tokens (draft_kv_map's valid
//           prefix; their tokens as recorded there), then this step's tokens up to the first
//           proposal; a proposing sequence's last row gives proposal 0. Split into several passes
//           when longer than the draft's token budget (the rows that give proposals in the last).
//   pass j (1..k): each sequence with more than j - 1 proposals computes proposal j - 1; its
//           logits give proposal j while j < its count (the last pass only completes the draft's
//           cache, so a run of accepted proposals leaves it whole).
// Greedy proposals keep every request exact with the model's sample-and-compare acceptance (a
// proposal is accepted when the model's row samples it): for a one-token draft distribution that
// is the speculative-sampling rule. Pure host logic, tested on the CPU.
#pragma once

#include <cstdint>
#include <vector>

#include "base/result.hpp"
#include "model/draft_kv_map.hpp"
#include "model/step.hpp"

namespace coserve::gpu {

struct draft_pass {
  // The draft's batch: tokens are ids (literal, or -(slot + 1) for a proposal on the device);
  // `sample`: this sequence's last row gives a proposal.
  std::vector<scheduled_seq> seqs;
  std::vector<int32_t> out_slots;  // per sampling sequence (batch order), the slot its pick goes to
};

struct draft_step {
  std::vector<draft_pass> passes;
  struct proposer {
    size_t seq = 0;     // index into the plan's sequences
    int32_t first = 0;  // index of its first proposal within the sequence's tokens
    int32_t count = 0;  // its proposals
    int32_t slot0 = 0;  // slot of proposal j: slot0 + j
  };
  std::vector<proposer> proposers;
  // What pass 0 computed, per sequence (for draft_kv_map::note_draft once the passes are enqueued).
  struct computed {
    size_t seq = 0;
    int32_t start = 0;
    std::vector<int32_t> tokens;
  };
  std::vector<computed> first;
};

// inputs[i]: plan.seqs[i]'s tokens with k_token_from_last_step resolved to literal ids and the
// proposals still k_token_from_draft. Proposal slots are slot_base + k * proposer index + j.
// max_tokens: the draft's token budget per pass. Errors: a proposal placeholder outside a
// sequence's last num_draft tokens, more than k proposals, or an input id still negative.
result<draft_step> plan_draft(const step_plan& plan,
                              const std::vector<std::vector<int32_t>>& inputs,
                              const draft_kv_map& map, int32_t slot_base, int32_t k,
                              int32_t max_tokens);

}  // namespace coserve::gpu
