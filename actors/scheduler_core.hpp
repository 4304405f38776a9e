// scheduler_core — continuous batching, one step_draft at a time (the scheduler actor's pure core).
//
// Policy (vLLM V1-like): a token budget (max_num_batched_tokens) and a sequence cap (max_num_seqs)
// per step. Running sequences go first, in admission order (decodes and unfinished prefill
// chunks); the remaining budget admits waiting sequences, ordered by (priority, arrival), with
// chunked prefill. The KV allocator (kv_manager) places the draft in blocks: it may preempt the
// newest running sequence by recompute (it returns to the waiting queue with its outputs kept) or
// defer admissions that do not fit. Nothing is dropped.
//
// Two steps in flight: draft() may be called while the previous step's result is outstanding (at
// most one). A sequence whose last token is still being sampled gets `k_token_from_last_step` as
// its decode input.
//
// Speculative decoding (config.speculation): a decode (one token to compute: known, or still being
// sampled by the step in flight) may get proposals (n-gram lookup over its known tokens, which
// also predicts a token still being sampled; at most k, fewer near max_tokens / max_model_len /
// the step's budget, none with a grammar, while more than disable_by_batch_size sequences run,
// or while its back-off lasts). The step computes that token and the proposals; the result
// brings 1 + (accepted proposals) tokens, and the computed count moves past the accepted ones
// only, so rejected positions are computed again. A sequence with proposals in flight is not
// scheduled again until their result is in (its next position is unknown till then). Each draft
// must be answered (on_allocation) before the next draft(); on_result() must be called with results
// in step order.
//
// Threads: none (owned by the scheduler actor, or by batch_planner in single-threaded use).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "actors/sequence.hpp"
#include "actors/step_draft.hpp"
#include "model/step.hpp"

namespace coserve::actors {

struct planner_config {
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
  int32_t max_model_len = 4096;
  int32_t eos_id = -1;             // -1: none
  speculative_config speculation;  // off unless enabled()
};

// Speculative decoding counters (cumulative), as vLLM's spec_decode metrics.
struct speculation_stats {
  int64_t drafts = 0;                          // verify steps of sequences with proposals
  int64_t draft_tokens = 0;                    // tokens proposed
  int64_t accepted_tokens = 0;                 // proposals accepted
  std::vector<int64_t> accepted_per_position;  // [i]: proposals accepted at position i
};

// One sampled token applied to a sequence (or a sequence's end).
struct seq_event {
  seq_id_t seq_id = 0;
  uint64_t request_id = 0;
  int32_t index = 0;
  int32_t token = 0;
  const seq_output* output = nullptr;  // the executor's output (valid while the result lives)
  finish_reason finish = finish_reason::none;
  int32_t prompt_tokens = 0, completion_tokens = 0, cached_prompt_tokens = 0;
  // Speculative decoding, on the first event of a sequence that verified proposals this step.
  int32_t proposed = 0, accepted = 0;
};

class scheduler_core {
 public:
  explicit scheduler_core(planner_config config) : config_(config) {}

  // Enqueues a waiting sequence. With fork_parent set, the sequence waits for the parent's prompt
  // to be computed, then shares its blocks (copy-on-write).
  void add(sequence seq);
  // Ends a sequence now (stop string, cancellation). Returns true when the KV allocator may hold
  // state for it (the caller releases it there). No-op (false) for unknown or finished ids.
  bool finish(seq_id_t id, finish_reason reason);

  bool draft_outstanding() const noexcept { return outstanding_; }
  step_draft draft();
  void on_allocation(const step_allocation& alloc);
  // Applies a step's sampled tokens; one event per live sequence sampled, with finish set when
  // eos / a stop token id / max_tokens / max_model_len ends it (the caller releases its blocks).
  std::vector<seq_event> on_result(const step_result& result);

  // True while sequences run or wait.
  bool has_work() const noexcept {
    return !running_.empty() || !waiting_.empty() || !forking_.empty();
  }
  // True when a draft would schedule something now.
  bool can_schedule() const;
  int32_t num_running() const noexcept { return static_cast<int32_t>(running_.size()); }
  int32_t num_waiting() const noexcept {
    return static_cast<int32_t>(waiting_.size() + forking_.size());
  }
  int64_t num_preemptions() const noexcept { return preemptions_; }
  const speculation_stats& speculation() const noexcept { return spec_stats_; }
  // Tokens of waiting sequences not yet computed (prompts, and outputs to recompute after a
  // preemption); n > 1 children waiting for their parent are not counted. O(waiting).
  int64_t num_waiting_tokens() const;
  const sequence* find(seq_id_t id) const;
  // Calls f(const sequence&) for every sequence not finished (any order).
  template <class F>
  void for_each_sequence(F&& f) const {
    for (const auto& [id, s] : seqs_)
      if (s.state != seq_state::finished) f(s);
  }
  const planner_config& config() const noexcept { return config_; }

 private:
  sequence& at(seq_id_t id) { return seqs_.at(id); }
  void insert_waiting(seq_id_t id);
  void drop(seq_id_t id);
  new_seq announce_of(const sequence& s) const;
  static void send_unsent_tokens(sequence& s, draft_entry& e, std::vector<int32_t>& appended);
  // Speculative decoding: adds proposals to a decode entry of one token (see the header comment).
  void propose(sequence& s, draft_entry& e, step_draft& d, int32_t budget, uint64_t step_id);
  // Proposals the sequence may get now (0: none: off, a grammar, a large batch, at its limits).
  int32_t proposal_limit(const sequence& s) const;

  planner_config config_;
  std::unordered_map<seq_id_t, sequence> seqs_;
  std::vector<seq_id_t> running_;   // admission order; back() is the newest
  std::vector<seq_id_t> waiting_;   // sorted by (priority, arrival)
  std::vector<seq_id_t> forking_;   // n > 1 children waiting for their parent's prompt
  std::vector<seq_id_t> finished_;  // records erased at the next draft
  uint64_t next_step_ = 1;
  uint64_t last_step_ = 0;  // the previous draft's step id
  bool outstanding_ = false;
  int64_t preemptions_ = 0;
  speculation_stats spec_stats_;
  // The back-off a new sequence starts with: the same rule applied to every verified proposal of
  // every sequence (empty lookups not counted), so that with proposals that keep being rejected a
  // new sequence does not probe them again at 1, 2, 4, ... steps.
  speculation_backoff spec_prior_;
};

}  // namespace coserve::actors
