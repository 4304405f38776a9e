// batch_planner — continuous batching over the block pool, one step_plan at a time.
//
// Policy (vLLM V1-like): a token budget (max_num_batched_tokens) and a sequence cap (max_num_seqs)
// per step. Running sequences go first, in admission order (decodes and unfinished prefill
// chunks); the remaining budget admits waiting sequences, ordered by (priority, arrival), with
// chunked prefill. When blocks run out for a running sequence, the newest running sequence not yet
// scheduled this step is preempted by recompute (blocks freed, back to the waiting queue with its
// outputs kept); a waiting sequence that does not fit simply waits. Nothing is dropped.
//
// Two steps in flight: plan() may be called while the previous plan's result is outstanding (at
// most one). A sequence whose last token is still being sampled gets `k_token_from_last_step` as
// its decode input. on_result() must be called with results in step order.
//
// Threads: none (owned by the scheduler actor).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "actors/block_pool.hpp"
#include "actors/sequence.hpp"
#include "model/step.hpp"

namespace coserve::actors {

struct planner_config {
  int32_t max_num_seqs = 256;
  int32_t max_num_batched_tokens = 2048;
  int32_t max_model_len = 4096;
  int32_t eos_id = -1;  // -1: none
};

// One sampled token applied to a sequence (or a sequence's end).
struct seq_event {
  seq_id_t seq_id = 0;
  uint64_t request_id = 0;
  int32_t index = 0;
  int32_t token = 0;
  const seq_output* output = nullptr;  // the executor's output (valid during the on_result call's result)
  finish_reason finish = finish_reason::none;
  int32_t prompt_tokens = 0, completion_tokens = 0, cached_prompt_tokens = 0;
};

class batch_planner {
 public:
  batch_planner(planner_config config, block_pool_options pool_options);

  // Enqueues a waiting sequence (state, counters and blocks are reset). With fork_parent set, the
  // sequence waits for the parent's prompt to be computed, then shares its blocks (copy-on-write).
  void add(sequence seq);
  // Ends a sequence now (stop string, cancellation): its blocks are freed and the executor is told
  // at the next plan. No-op for unknown or finished ids.
  void finish(seq_id_t id, finish_reason reason);

  step_plan plan();
  // Applies a step's sampled tokens; returns one event per live sequence sampled, with finish set
  // when eos / a stop token id / max_tokens / max_model_len ends it (its blocks are freed at once).
  std::vector<seq_event> on_result(const step_result& result);

  // True while sequences run or wait, or finished ones still have executor state to drop.
  bool has_work() const noexcept {
    return !running_.empty() || !waiting_.empty() || !forking_.empty() || !to_finish_.empty();
  }
  int32_t num_running() const noexcept { return static_cast<int32_t>(running_.size()); }
  int32_t num_waiting() const noexcept { return static_cast<int32_t>(waiting_.size() + forking_.size()); }
  int64_t num_preemptions() const noexcept { return preemptions_; }
  const sequence* find(seq_id_t id) const;
  block_pool& pool() noexcept { return pool_; }
  const block_pool& pool() const noexcept { return pool_; }

 private:
  sequence& at(seq_id_t id) { return seqs_.at(id); }
  void insert_waiting(seq_id_t id);
  void release_blocks(sequence& s);
  void preempt(sequence& s, step_plan& plan);
  void drop(seq_id_t id);
  bool try_fork(sequence& child);
  int32_t apply_prefix_cache(sequence& s);
  // Blocks (and one copy-on-write block) to write [num_computed, num_computed + n); false when the
  // pool cannot provide them (nothing changed then).
  int32_t blocks_needed(const sequence& s, int32_t n) const;
  void grow(sequence& s, int32_t n, step_plan& plan);
  void schedule(sequence& s, int32_t n, step_plan& plan);
  void register_full_blocks(sequence& s);

  planner_config config_;
  block_pool pool_;
  std::unordered_map<seq_id_t, sequence> seqs_;
  std::vector<seq_id_t> running_;   // admission order; back() is the newest
  std::vector<seq_id_t> waiting_;   // sorted by (priority, arrival)
  std::vector<seq_id_t> forking_;   // n > 1 children waiting for their parent's prompt
  std::vector<seq_id_t> to_finish_; // executor state to drop at the next plan
  uint64_t next_step_ = 1;
  uint64_t last_step_ = 0;
  int64_t preemptions_ = 0;
};

}  // namespace coserve::actors
