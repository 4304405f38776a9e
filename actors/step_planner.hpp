// step_planner — continuous batching's policy, one step_draft at a time: the pure core the
// scheduler actor runs (and batch_planner composes with the KV manager for single-threaded use).
//
// Requests: add_request() turns a tokenized request into n sequences (the first computes the
// prompt, the others fork from it once it is computed), each with its seed (params.seed + index,
// or one derived from the request id) and the model's extra EOS ids as stop ids unless
// ignore_eos. A request ends when its last sample finishes, or at once by end_request()
// (cancellation, an error).
//
// Steps (vLLM V1-like): a token budget (max_num_batched_tokens) and a sequence cap (max_num_seqs)
// per step. Running sequences go first, in admission order (decodes and unfinished prefill
// chunks); the remaining budget admits waiting sequences, ordered by (priority, arrival), with
// chunked prefill. The KV manager places the draft in blocks: it may preempt the newest running
// sequence by recompute (it returns to the waiting queue with its outputs kept) or defer
// admissions that do not fit; on_allocation() learns what ran. Nothing is dropped.
//
// Two steps in flight: draft() gives the next step while fewer than two drafted steps await their
// result and the previous draft's allocation is known. A sequence whose last token is still being
// sampled gets `k_token_from_last_step` as its decode input. Results come in step order.
//
// Speculative decoding (config.speculation): a decode (one token to compute: known, or still being
// sampled by the step in flight) may get proposals (n-gram lookup over its known tokens, which
// also predicts a token still being sampled; at most k, fewer near max_tokens / max_model_len /
// the step's budget, none with a grammar, while more than disable_by_batch_size sequences run, or
// while its back-off lasts). The result brings 1 + (accepted proposals) tokens, and the computed
// count moves past the accepted ones only, so rejected positions are computed again. A sequence
// with proposals in flight is not scheduled again until their result is in.
//
// Rules beyond the batch:
// - An admission deferred while no sequence holds blocks can never fit: its request ends with an
//   error naming the cache size.
// - A failed step ends the requests that had sequences in it; `max_consecutive_failures` failed
//   steps in a row, or one error the executor marks fatal (k_executor_fatal), fail the engine:
//   every request ends with an error and later ones are refused at once.
//
// What the KV manager must hear (blocks to free, each step's outcome) is queued as kv_ops, in the
// order decided, and leaves with the next draft (take_kv_ops() for an owner that applies them at
// once). Sampled tokens and ended requests are appended to a step_emission the caller passes.
//
// Threads: none.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/sequence.hpp"
#include "actors/speculation.hpp"
#include "actors/step_draft.hpp"
#include "base/id_map.hpp"
#include "base/result.hpp"
#include "model/step.hpp"

namespace coserve::actors {

struct planner_config {
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
  int32_t max_model_len = 4096;
  int32_t eos_id = -1;             // -1: none
  speculative_config speculation;  // off unless enabled()
  std::vector<int32_t> extra_eos;  // more ids that end a sample (unless ignore_eos)
  int32_t num_kv_blocks = 0;       // the cache's size, for the message of a request that never fits
  int32_t max_consecutive_failures = 3;
  // Prompts are never chunked: a waiting sequence is admitted only when all of its tokens fit the
  // step's remaining budget (encoder models, which see a whole sequence in one pass). Every
  // prompt must then fit max_num_batched_tokens.
  bool whole_prompts = false;
  // LoRA adapters served (sampling_params::lora_id in [1, num_loras]); 0: none, and lora_masks()
  // does not look.
  int32_t num_loras = 0;
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

// A request ended by the planner (cancelled, failed, never fits): every unfinished sample ends.
struct request_end {
  uint64_t request_id = 0;
  finish_reason reason = finish_reason::abort;
  std::string message;
};

// What a planner call produced for the request streams, in order.
struct step_emission {
  std::vector<seq_event> tokens;
  std::vector<request_end> ends;
  // Requests whose first sequence was scheduled, with the time they were submitted (queue time).
  std::vector<std::chrono::steady_clock::time_point> first_scheduled;
  bool empty() const noexcept { return tokens.empty() && ends.empty(); }
};

// One call the scheduler actor made on its step planner, as recorded for tests that replay a
// live run through a batch_planner (engine_config::planner_journal). Only the fields of its kind
// are set.
struct planner_call {
  enum class kind : uint8_t {
    start,          // config: the planner was made with it
    add_request,    // request_id, prompt, params, priority, reason (set when cancelled on arrival)
    end_request,    // request_id, reason, message
    finish_sample,  // seq_id
    fail_all,       // message
    draft,          // step_id (0: nothing drafted; its kv_ops still left)
    take_kv_ops,    // kv_ops sent without a draft
    allocation,     // allocation
    result,         // result, ran
    failed_step,    // step_id, failure
  };
  kind what = kind::draft;
  planner_config config;
  uint64_t request_id = 0;
  std::vector<int32_t> prompt;
  sampling_params params;
  int32_t priority = 0;
  finish_reason reason = finish_reason::none;
  std::string message;
  seq_id_t seq_id = 0;
  uint64_t step_id = 0;
  step_allocation allocation;
  step_result result;
  bool ran = true;
  error failure;
};

class step_planner {
 public:
  using clock = std::chrono::steady_clock;

  explicit step_planner(planner_config config) : config_(std::move(config)) {}

  // ---- requests ----
  // A tokenized request (see the header comment). When the engine has failed, or `cancelled` is
  // set (cancelled while it was tokenized), it ends at once (an end in `out`).
  void add_request(uint64_t request_id, std::vector<int32_t> prompt, const sampling_params& params,
                   int32_t priority, clock::time_point submitted, step_emission& out,
                   finish_reason cancelled = finish_reason::none);
  // Ends every unfinished sample of the request now with `reason` (cancellation, an error); its
  // blocks are released. No-op for a request not held.
  void end_request(uint64_t request_id, finish_reason reason, const std::string& message,
                   step_emission& out);
  // A stop string ended one sample (found outside the planner): it finishes with `stop`.
  void finish_sample(seq_id_t id);
  // The engine cannot run steps any more: every request ends with an error, later ones too.
  void fail_all(const std::string& reason, step_emission& out);

  // Low level (single-threaded tests): a sequence as is, and a sequence's end by id. finish()
  // returns false for unknown or finished ids.
  void add(sequence seq);
  bool finish(seq_id_t id, finish_reason reason);

  // ---- steps ----
  // Whether draft() may be called: not failed, fewer than two steps await their result, the last
  // draft's allocation is known, and some sequence runs or waits.
  bool can_draft() const noexcept;
  // The next step. step_id 0: nothing can be scheduled now (the draft may still carry kv_ops).
  step_draft draft();
  // What the KV manager made of a draft (every draft with a step id, in order). Ends requests
  // that can never fit; a step with nothing scheduled counts as done.
  void on_allocation(const step_allocation& alloc, step_emission& out);
  // A step's sampled tokens (steps in order): one event per live sequence sampled, with finish
  // set when eos / a stop token id / max_tokens / max_model_len ends it. `ran`: false when the
  // executor left every sequence out (all in an earlier failed step), which proves nothing about
  // the device (the count of failed steps in a row goes on).
  void on_result(const step_result& result, step_emission& out, bool ran = true);
  // A step that failed with `e`: ends the requests in it, or fails the engine (see the header).
  void on_failed_step(uint64_t step_id, const error& e, step_emission& out);
  // Returns (and forgets) the kv_ops queued since the last draft.
  std::vector<kv_op> take_kv_ops() { return std::exchange(kv_ops_, {}); }

  // ---- state ----
  bool failed() const noexcept { return failed_; }
  const std::string& failure() const noexcept { return failure_; }
  // True while sequences run or wait.
  bool has_work() const noexcept {
    return !running_.empty() || !waiting_.empty() || !forking_.empty();
  }
  // True when a draft would schedule something now.
  bool can_schedule() const;
  int32_t steps_in_flight() const noexcept { return in_flight_; }
  bool draft_outstanding() const noexcept { return outstanding_; }
  int32_t num_running() const noexcept { return static_cast<int32_t>(running_.size()); }
  int32_t num_waiting() const noexcept {
    return static_cast<int32_t>(waiting_.size() + forking_.size());
  }
  int64_t num_preemptions() const noexcept { return preemptions_; }
  const speculation_stats& speculation() const noexcept { return spec_stats_; }
  // Tokens of waiting sequences not yet computed (prompts, and outputs to recompute after a
  // preemption); n > 1 children waiting for their parent are not counted. O(waiting).
  int64_t num_waiting_tokens() const;
  // The LoRA adapters of the running and of the waiting sequences, as bit masks (bit k: lora_id
  // k + 1; adapters past the 64th are not represented). O(running + waiting) with adapters served,
  // nothing without.
  std::pair<uint64_t, uint64_t> lora_masks() const;
  const sequence* find(seq_id_t id) const;
  // The requests held, running ones first, then oldest first (at most `limit`).
  std::vector<request_status> requests(clock::time_point now, size_t limit) const;
  const planner_config& config() const noexcept { return config_; }

 private:
  struct request {
    int32_t samples = 1;
    int32_t live = 1;
    bool queued = true;  // no sequence scheduled yet (queue time)
    clock::time_point submitted;
  };
  sequence& at(seq_id_t id) { return *seqs_.find(id); }
  void insert_waiting(seq_id_t id);
  void drop(seq_id_t id);
  void release(seq_id_t id) { kv_ops_.push_back({kv_op::kind::release, id}); }
  void sample_finished(uint64_t request_id);
  std::vector<seq_id_t> take_step(uint64_t step_id);
  void apply_forks(step_draft& d);
  void draft_running(step_draft& d, int32_t& budget, uint64_t step_id);
  void draft_waiting(step_draft& d, int32_t& budget);
  void apply_preemptions(const step_allocation& alloc);
  void apply_scheduled(const step_allocation& alloc, step_emission& out);
  seq_event apply_output(sequence& s, const step_result& result, size_t i);
  void count_verification(sequence& s, int32_t accepted, seq_event& ev);
  finish_reason finish_of(const sequence& s, int32_t token) const;
  new_seq announce_of(const sequence& s) const;
  static void send_unsent_tokens(sequence& s, draft_entry& e, std::vector<int32_t>& appended);
  // Speculative decoding: adds proposals to a decode entry of one token (see the header comment).
  void propose(sequence& s, draft_entry& e, step_draft& d, int32_t budget, uint64_t step_id);
  // Proposals the sequence may get now (0: none: off, a grammar, a large batch, at its limits).
  int32_t proposal_limit(const sequence& s) const;
  bool unresolved(const sequence& s) const noexcept {
    return s.pending > 1 ||
           (s.pending == 1 && (s.pending_step != last_step_ || s.spec_proposed > 0));
  }
  bool at_limit(const sequence& s) const noexcept {
    return s.num_generated() >= s.params.max_tokens || s.num_tokens() >= config_.max_model_len;
  }

  // Output tokens a sequence has room for from the start (see add()).
  static constexpr int64_t k_output_reserve = 4096;

  planner_config config_;
  id_map<sequence> seqs_;  // every sequence not yet erased (finished ones until the next draft)
  std::unordered_map<uint64_t, request> requests_;
  std::vector<seq_id_t> running_;   // admission order; back() is the newest
  std::vector<seq_id_t> waiting_;   // sorted by (priority, arrival)
  std::vector<seq_id_t> forking_;   // n > 1 children waiting for their parent's prompt
  std::vector<seq_id_t> finished_;  // records erased at the next draft
  std::vector<kv_op> kv_ops_;       // for the KV manager, before the next draft
  // Steps allocated whose result has not come back: step id and the sequences it runs (kept for
  // its failure); vectors of finished steps are reused.
  std::vector<std::pair<uint64_t, std::vector<seq_id_t>>> steps_;
  std::vector<std::vector<seq_id_t>> spare_ids_;
  uint64_t next_step_ = 1;
  uint64_t last_step_ = 0;    // the previous draft's step id
  int32_t in_flight_ = 0;     // drafted steps whose result has not come back
  bool outstanding_ = false;  // a draft's allocation is not known yet
  int64_t preemptions_ = 0;
  int32_t consecutive_failures_ = 0;
  bool failed_ = false;
  std::string failure_;
  speculation_stats spec_stats_;
  // The back-off a new sequence starts with: the same rule applied to every verified proposal of
  // every sequence (empty lookups not counted), so that with proposals that keep being rejected a
  // new sequence does not probe them again at 1, 2, 4, ... steps.
  speculation_backoff spec_prior_;
};

}  // namespace coserve::actors
