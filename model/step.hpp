// The step protocol between the scheduler and an executor (CPU or GPU), modelled on vLLM V1's
// SchedulerOutput / ModelRunnerOutput. Plain data, host vectors only, never device pointers.
//
// Counting model: every sequence has num_tokens (prompt + generated) and num_computed_tokens (the
// ones whose K/V sit in the cache). A step hands a sequence `tokens`, to be computed at positions
// [start_pos, start_pos + tokens.size()); start_pos == num_computed_tokens before the step.
//
// Two steps in flight: the scheduler plans step N+1 before it has seen step N's sampled token, so a
// decode's input may be `k_token_from_last_step`; the executor substitutes the token it sampled for
// that sequence in its previous step. The host learns sampled ids one step later.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "base/small_vector.hpp"
#include "model/sampling_params.hpp"

namespace coserve {

using seq_id_t = uint64_t;

// Placeholder input token: "the token this sequence sampled in the previous step".
inline constexpr int32_t k_token_from_last_step = -1;
// Placeholder proposal (speculative decoding with a draft model): "the executor's draft model
// proposes this one" (only among a scheduled_seq's last num_draft tokens).
inline constexpr int32_t k_token_from_draft = -2;

// A sequence the executor has not seen before (or sees again after preemption by recompute).
// The executor keeps its sampling state (params, rng, token history for penalties) until the
// sequence appears in step_plan::finished.
struct new_seq {
  seq_id_t seq_id = 0;
  std::vector<int32_t> prompt_ids;  // prompt tokens (penalties look at them)
  std::vector<int32_t> output_ids;  // tokens already generated (non-empty after preemption)
  sampling_params params;
  uint64_t seed = 0;  // effective rng seed (params.seed or one drawn by the engine)
};

// One sequence's slice of a step.
struct scheduled_seq {
  seq_id_t seq_id = 0;
  // Inputs; may hold k_token_from_last_step (decode only). Up to 8 inside the plan (a decode, or
  // one with up to 7 proposals), more on the heap.
  small_vector<int32_t, 8> tokens;
  int32_t start_pos = 0;  // position of tokens[0] == num_computed_tokens
  // The physical KV blocks covering [0, start_pos + tokens.size()). As the KV allocator sends it,
  // a change to the table the executor's side holds for the sequence (held_block_tables): the
  // first `table_kept` blocks (below) stay, `block_table` holds the rest. A whole table has
  // table_kept 0, which is what an executor's execute() and launch() receive (the executor actor
  // expands changes).
  std::vector<int32_t> block_table;
  bool sample = false;  // true when the last token's logits are sampled this step
                        // (false for a prefill chunk that does not reach the end)
  // Speculative decoding: the last num_draft tokens are proposals to verify (sample is then true).
  // The executor scores every one of the last 1 + num_draft positions and outputs, in order, the
  // proposals it accepts and then one token of its own (the correction of the first rejected
  // proposal, or the next token after all of them): 1 to 1 + num_draft outputs for the sequence.
  int32_t num_draft = 0;
  int32_t table_kept = 0;  // see block_table
};

struct step_plan {
  uint64_t step_id = 0;
  std::vector<new_seq> new_seqs;  // registered before the forward
  std::vector<std::pair<int32_t, int32_t>>
      block_copies;                 // (src, dst) copy-on-write, before the forward
  std::vector<scheduled_seq> seqs;  // what to compute, in batch order
  std::vector<seq_id_t> finished;   // drop their state after this step
};

struct token_logprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

// The log-probability of the prompt token at some position under the logits of the position
// before it (raw logits: no temperature, penalties or grammar), its rank among all tokens (1: the
// most likely), and the top tokens there.
struct prompt_logprob {
  int32_t token = 0;
  float logprob = 0.0f;
  int32_t rank = 1;
  std::vector<token_logprob> top;
};

struct seq_output {
  seq_id_t seq_id = 0;
  int32_t token = 0;                        // the sampled id
  float logprob = 0.0f;                     // log-softmax of the sampled id (after processors)
  std::vector<token_logprob> top_logprobs;  // when params.logprobs > 0
  std::vector<float> logits;                // raw logits, only when the executor is asked for them
  // params.prompt_logprobs >= 0: on the sequence's first output only, one entry per prompt
  // position 1 .. prompt length - 1 (position 0 has no logits before it).
  std::vector<prompt_logprob> prompt_logprobs;
  // A pooling request (params.pooling.enabled): its pooled vector, or a cross-encoder's class
  // logits; `token` is then 0 and means nothing.
  std::vector<float> embedding;
};

struct step_result {
  uint64_t step_id = 0;
  // One per scheduled_seq with sample == true, in batch order; a sequence with proposals
  // (num_draft > 0) has one per token it produced, consecutive, in order.
  std::vector<seq_output> outputs;
};

}  // namespace coserve
