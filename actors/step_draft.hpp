// step_draft / step_allocation — what the two halves of the step planner exchange each step.
//
// The step planner (step_planner.hpp) decides *which* sequences run and how many tokens each may
// compute (token budget, max_num_seqs, decodes first, priority/FCFS admission, chunked prefill,
// forks for n > 1). The KV manager (kv_manager.hpp) decides *where* their K/V go: it owns the block
// pool and every block table, applies prefix-cache hits, allocates and copies blocks on write,
// preempts the newest running sequence by recompute when blocks run out, and turns the draft into
// the executor's step_plan. Its step_allocation tells the step planner what was actually
// scheduled. Before a draft's entries, the KV manager applies the draft's kv_ops: the blocks the
// planner released and the outcomes of steps, in the order the planner decided them.
//
// Threads: none (plain data, moved between actors).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "model/step.hpp"

namespace coserve::actors {

// One sequence's share of a step.
struct draft_entry {
  seq_id_t seq_id = 0;
  int32_t tokens = 0;         // tokens wanted this step (> 0); the allocator may schedule fewer
  int32_t num_tokens = 0;     // the sequence's length including a token still being sampled
  bool admit = false;         // a waiting sequence: prefix lookup; deferred when it does not fit
  bool count_query = false;   // first admission: counted in the prefix-cache hit rate
  uint32_t append_begin = 0;  // known tokens the allocator has not been sent yet, in order:
  uint32_t append_count = 0;  //   step_draft::appended[append_begin, append_begin + count)
  int32_t announce = -1;      // admissions: the executor registration, an index in
                              //   step_draft::announcements
  // Speculative decoding: the last proposal_count of `tokens` are proposals to verify,
  // step_draft::proposals[proposal_begin, proposal_begin + count); they follow every known token.
  uint32_t proposal_begin = 0;
  uint32_t proposal_count = 0;
  // The scheduler's computed count: lower than the allocator's after rejected proposals, whose
  // positions are then computed again (the allocator rolls its count back to this; -1: not given).
  int32_t num_computed = -1;
};

// An n > 1 sample sharing its parent's computed prompt blocks (copy-on-write).
struct draft_fork {
  seq_id_t child = 0;
  seq_id_t parent = 0;
  int32_t shared_tokens = 0;  // prompt positions [0, shared_tokens) are shared
  new_seq announce;           // the child's executor registration
};

// A block-table change the step planner decided between two drafts, applied in order before the
// next draft's entries.
struct kv_op {
  enum class kind : uint8_t {
    release,         // id is a sequence: its blocks are freed (finished, cancelled)
    step_succeeded,  // id is a step: the full blocks it filled enter the prefix cache
    step_failed,     // id is a step: its blocks never enter the prefix cache
  };
  kind what = kind::release;
  uint64_t id = 0;
  bool operator==(const kv_op&) const = default;
};

struct step_draft {
  uint64_t step_id = 0;                // 0: no step, only kv_ops
  std::vector<kv_op> ops;              // applied first, in order
  std::vector<draft_fork> forks;       // applied first
  std::vector<draft_entry> entries;    // running sequences in admission order, then admissions
  std::vector<int32_t> appended;       // every entry's new tokens, back to back (one allocation)
  std::vector<int32_t> proposals;      // every entry's proposals, back to back
  std::vector<new_seq> announcements;  // the admissions' executor registrations

  std::span<const int32_t> append_of(const draft_entry& e) const noexcept {
    return {appended.data() + e.append_begin, e.append_count};
  }
  std::span<const int32_t> proposals_of(const draft_entry& e) const noexcept {
    return {proposals.data() + e.proposal_begin, e.proposal_count};
  }
};

struct step_allocation {
  struct scheduled {
    seq_id_t seq_id = 0;
    int32_t start_pos = 0;      // == num_computed before the step
    int32_t tokens = 0;         // computed this step
    int32_t cached_tokens = 0;  // admissions: prompt tokens served by the prefix cache
  };
  uint64_t step_id = 0;
  std::vector<scheduled> seqs;      // batch order
  std::vector<seq_id_t> preempted;  // running sequences preempted by recompute (blocks freed)
  std::vector<seq_id_t> deferred;   // admissions that did not fit (hold no blocks)
  int32_t num_free_blocks = 0;      // after this step's allocations
  int32_t num_holders = 0;          // sequences holding blocks after this step's allocations
  int64_t prefix_queries = 0, prefix_hits = 0;  // cumulative, in tokens
};

}  // namespace coserve::actors
