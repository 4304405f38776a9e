// Token sampling over one logits row and one sequence's state. Pure functions: no threads, no
// globals; the executor owns a sampling_state per sequence.
//
// Order (each step is skipped when its parameter disables it):
//   0. allowed_token_ids: every other token set to -inf; then
//      structured output: tokens the grammar does not allow next set to -inf (when min_tokens
//      would then leave no token at all - the grammar is complete and only allows eos - the
//      min_tokens mask is dropped for that step: the grammar wins)
//   1. logit_bias added to the raw logits
//   2. min_tokens: eos ids (unless ignore_eos) and stop_token_ids set to -inf until enough output
//   3. repetition penalty (HF: over prompt + output; positive logits divided, negative multiplied)
//   4. presence / frequency penalties (OpenAI: over output only; l -= f * count + p * [count > 0])
//   5. temperature (greedy: skipped, argmax)
//   6. top-k, top-p, min-p masks (to -inf), the most likely token always kept
//   7. sample from softmax (seeded) or argmax; logprobs are log_softmax of the processed row.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "model/rng.hpp"
#include "model/sampling_params.hpp"
#include "model/step.hpp"
#include "model/structured_output.hpp"

namespace coserve {

struct sampling_state {
  sampling_params params;
  std::vector<int32_t> eos_ids;                    // from the model's generation config
  std::unordered_map<int32_t, int32_t> seen;       // prompt + output token -> 1 (repetition)
  std::unordered_map<int32_t, int32_t> out_count;  // output token -> count (presence/frequency)
  int32_t num_output = 0;
  uint64_t seed = 0;
  // The draws for output position k come from seq_rng(position_seed(seed, k)) (draw_rng(), set by
  // the sampling functions below), so a sequence recomputed after preemption, its outputs replayed,
  // draws what it would have drawn: seeded output does not depend on scheduling.
  seq_rng rng;
  // With params.grammar: the sequence's matcher (already past `output`) and its bitmask buffer.
  std::optional<grammar_matcher> matcher;
  std::vector<uint32_t> mask;
  // Set when a token was accepted that the grammar does not allow (it never samples one; an
  // output replayed after preemption could only disagree if the grammar changed).
  bool grammar_violated = false;

  sampling_state(sampling_params p, uint64_t seed, std::span<const int32_t> prompt,
                 std::span<const int32_t> output, std::vector<int32_t> eos);

  // Records a generated token (penalties and min_tokens see it from the next step on; the grammar
  // matcher advances by it).
  void accept(int32_t token);
  // The rng of output position num_output, fresh (the sampling functions call it before drawing).
  seq_rng& draw_rng() noexcept {
    rng = seq_rng(position_seed(seed, num_output));
    return rng;
  }
  static uint64_t position_seed(uint64_t seed, int64_t position) noexcept {
    return seed ^ (0x9e3779b97f4a7c15ull * uint64_t(position + 1));
  }
  // A speculative draft's proposal for output position `position`: a stream of its own, so the
  // draft's draw and the acceptance test never share uniforms.
  static uint64_t draft_seed(uint64_t seed, int64_t position) noexcept {
    return position_seed(seed, position) ^ 0xd1b54a32d192ed03ull;
  }
};

struct sample_output {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<token_logprob> top_logprobs;
};

// Steps 1-4 in place. `min_tokens_mask` false skips step 2.
void apply_penalties(std::span<float> logits, const sampling_state& st,
                     bool min_tokens_mask = true);

// Steps 5-6 in place (no-op for greedy except nothing; greedy keeps the row).
void apply_temperature_and_filters(std::span<float> logits, const sampling_params& p);

// log_softmax of a row (-inf entries stay -inf).
void log_softmax(std::span<const float> logits, std::vector<float>& out);

// The whole pipeline: processes a copy of `raw`, picks a token, fills logprobs when asked.
// Does not call st.accept(); the caller does once the token is final. Not const on `st`: the
// seeded rng advances and the grammar's mask is filled into st.mask.
sample_output sample_token(std::span<const float> raw, sampling_state& st);

// A prompt token's entry (vLLM's prompt_logprobs): the log-softmax of `raw` at `token`, its rank
// (1 + the number of tokens with a larger logit) and the top_n most likely tokens (ties: lower id
// first). Raw logits: nothing of the request's sampling applies.
prompt_logprob score_prompt_token(std::span<const float> raw, int32_t token, int32_t top_n);

// Speculative decoding: decides on a proposed token `draft` at one position, from that position's
// raw logits, processed as sample_token() processes them (the state must have accepted every
// earlier token of the sequence). Greedy: the draft is accepted when it is the argmax, and the
// output is the argmax either way. Sampled (the rejection rule of speculative sampling for a
// proposal that is a single token, as n-gram lookup makes): the draft is accepted with its
// probability p(draft) under the processed distribution; otherwise the output is drawn from that
// distribution with the draft removed and renormalised. Either way the output follows the target
// distribution exactly. `accepted` tells which happened; the output's logprob is its log p.
// Does not call st.accept().
sample_output verify_token(std::span<const float> raw, sampling_state& st, int32_t draft,
                           bool& accepted);

// The same for a proposal drawn from a distribution q (a draft model sampling): accepted with
// probability min(1, p(draft) / q(draft)); otherwise the output is drawn from max(0, p - q),
// renormalised (from p when that is empty). Sampled requests only (greedy ones use verify_token).
sample_output verify_token_q(std::span<const float> raw, sampling_state& st, int32_t draft,
                             std::span<const float> q, bool& accepted);

// A draft model's proposal for a sampled request: the draft's raw logits processed by the
// request's temperature and top-k/top-p/min-p (no penalties: the rule above stays exact whatever
// q is), drawn with the sequence's rng. `q` gets the distribution it was drawn from.
int32_t draft_sample(std::span<const float> raw, const sampling_params& p, seq_rng& rng,
                     std::vector<float>& q);

}  // namespace coserve
