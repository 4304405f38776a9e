// Speculative decoding's host side: the --speculative-config JSON (vLLM's keys), the n-gram
// proposer (prompt lookup over a sequence's own tokens) and the per-sequence back-off.
//
// The n-gram proposer takes the last n tokens of the sequence (prompt and output), for n from
// prompt_lookup_max down to prompt_lookup_min, finds the latest earlier place where those n
// tokens occur with k tokens after them (else the latest place at all), and proposes the tokens
// that followed them there (at most k). No match: no proposal, and the sequence decodes as usual.
//
// Threads: none (plain data and pure functions; the scheduler actor owns the state).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"

namespace coserve::actors {

struct speculative_config {
  std::string method;                  // "" (off), "ngram" or "draft_model"
  int32_t num_speculative_tokens = 0;  // k: proposals verified per step at most
  int32_t prompt_lookup_min = 0;       // n-gram lengths tried, longest first
  int32_t prompt_lookup_max = 0;
  // No proposals while more sequences than this run (0: no limit): with a large batch the step is
  // compute-bound and verifying proposals costs more than it saves.
  int32_t disable_by_batch_size = 0;
  // Back off after rejected proposals (speculation_backoff). false: propose at every decode step
  // whatever the outcomes (to measure acceptance; not a vLLM key).
  bool backoff = true;
  std::string draft_model;  // draft_model: its Hugging Face folder

  bool enabled() const noexcept { return !method.empty() && num_speculative_tokens > 0; }
};

// Parses vLLM's --speculative-config JSON: {"method":"ngram","num_speculative_tokens":k,
// "prompt_lookup_min":a,"prompt_lookup_max":b,"disable_by_batch_size":c} or
// {"model":DIR,"num_speculative_tokens":k} (method "draft_model", which may be given), and
// "backoff":false (ours) to propose at every step. Both lookup bounds default to 5 when neither is
// given, else the one given. Errors ("invalid_argument") name the field: malformed JSON, unknown
// keys or methods, out-of-range values, lookup bounds with a draft model, a draft model without
// "model". (Whether the draft folder loads and matches the
// target's vocabulary is checked when the executor loads it.)
result<speculative_config> parse_speculative_config(std::string_view text);

// Reads token i of a sequence (prompt then output).
struct token_view {
  const std::vector<int32_t>* prompt;
  const std::vector<int32_t>* output;
  int32_t size() const noexcept { return static_cast<int32_t>(prompt->size() + output->size()); }
  int32_t operator[](int32_t i) const noexcept {
    const auto p = static_cast<int32_t>(prompt->size());
    return i < p ? (*prompt)[static_cast<size_t>(i)] : (*output)[static_cast<size_t>(i - p)];
  }
};

// Appends at most k proposed tokens to `out`; returns how many. `skip`: tokens still being sampled
// after `seq` (0 or 1): the tokens following a match predict them first, and the proposals are
// what follows those (a wrong prediction only gets the proposals rejected).
int32_t ngram_propose(const token_view& seq, int32_t min_n, int32_t max_n, int32_t k, int32_t skip,
                      std::vector<int32_t>& out);

// Per-sequence back-off: after a lookup that found nothing, or a proposal of which less than half
// was accepted, the sequence makes no lookup for 1, 2, 4, ... up to 64 decode steps; a proposal
// that does well halves that length. It bounds the lookups' cost and that of verifying proposals
// that keep being rejected. The scheduler applies the same rule to every verified proposal of every
// sequence, and a new sequence starts from that (so a draft that is rarely accepted is not probed
// afresh by each new request).
struct speculation_backoff {
  int32_t skip = 0;     // decode steps left without proposals
  int32_t penalty = 0;  // the last back-off length (0: none)

  void on_outcome(bool good) noexcept {
    if (good) {  // halved, not cleared: one lucky proposal does not restart the probing from 1 step
      penalty /= 2;
      return;
    }
    penalty = penalty == 0 ? 1 : std::min(64, 2 * penalty);
    skip = penalty;
  }
};

}  // namespace coserve::actors
