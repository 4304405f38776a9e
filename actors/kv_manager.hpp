// kv_manager — the KV allocator's pure core: block tables over a block_pool, prefix caching,
// copy-on-write forks and preemption by recompute. It turns a scheduler's step_draft into the
// executor's step_plan (block tables, block copies, placeholder inputs, sample flags).
//
// Per sequence it keeps the tokens it has been sent that it still reads (a window, see
// seq_kv::tokens), its block table, how many positions have K/V (num_computed, as planned: the
// executor computes them in step order) and how many leading full blocks are registered in the
// prefix cache. "Holders" are the sequences holding blocks, in
// admission order; the newest holder is the one preempted when blocks run out.
//
// Speculative decoding: a step may compute proposals past the known tokens; they are never
// hashed (only known tokens are), and when some are rejected the next draft entry carries the
// scheduler's lower computed count, to which this count (and the committed one) rolls back.
//
// A full block enters the prefix cache only once the step that filled it has succeeded
// (step_outcome(id, true)): until then another request could read K/V that a failing step never
// wrote. A failed step's blocks stay with their sequences, uncached, until they are released.
// Registering (hashing a block, indexing it) is paced: a successful step queues its sequences
// with newly committed full blocks (each at most once), and each resolve() registers up to
// k_register_per_step blocks (or an eighth of the queued sequences' count when that is more), so
// the block boundary that many decoding sequences cross on the same step is spread over the next
// steps instead of landing on one. The queue is drained whole before a prefix lookup and a
// sequence's own entries before its blocks are freed, so what a lookup or a later request finds is
// the same as registering at once.
//
// Threads: none. Owned by the KV allocator actor (or by batch_planner in single-threaded use).
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "actors/block_pool.hpp"
#include "actors/step_draft.hpp"
#include "base/id_map.hpp"
#include "model/step.hpp"

namespace coserve::actors {

class kv_manager {
 public:
  explicit kv_manager(block_pool_options options);

  // Applies the draft in order: its kv_ops, forks, then each entry (running ones grow, preempting
  // the newest holder when blocks run out; admissions look up the prefix cache and are deferred —
  // with every later admission — when they do not fit). A draft without a step id only applies its
  // kv_ops; its plan (step id 0) carries the sequences the executor has to drop.
  std::pair<step_plan, step_allocation> resolve(step_draft draft);

  // Applies the step planner's kv_ops in order (release, step_outcome).
  void apply(const std::vector<kv_op>& ops);

  // Frees a sequence's blocks now (finished or cancelled); the executor is told to drop it in the
  // next plan if it knew it. Unknown ids are ignored.
  void release(seq_id_t id);

  // How a resolved step ended: on success the full blocks it filled enter the prefix cache; on
  // failure they never do. Unknown step ids are ignored.
  void step_outcome(uint64_t step_id, bool ok);
  // Steps resolved whose outcome has not been reported.
  size_t steps_pending() const noexcept { return pending_.size(); }

  // Released sequences the executor still has to drop (they go out with the next plan, or now).
  bool has_drops() const noexcept { return !drop_next_.empty(); }
  std::vector<seq_id_t> take_drops() { return std::exchange(drop_next_, {}); }

  const std::vector<int32_t>* block_table(seq_id_t id) const;
  int32_t num_holders() const noexcept { return static_cast<int32_t>(holders_.size()); }
  block_pool& pool() noexcept { return pool_; }
  const block_pool& pool() const noexcept { return pool_; }

 private:
  struct seq_kv {
    // Known tokens, as sent by the scheduler, from position tokens_base on: the positions before
    // it are computed and (with prefix caching) registered, so nothing here reads them again; they
    // are dropped a few blocks at a time (trim_tokens) and the window keeps its capacity, so a
    // decoding sequence's tokens take O(block size) memory and never reallocate.
    std::vector<int32_t> tokens;
    int32_t tokens_base = 0;
    std::vector<int32_t> table;
    int32_t table_sent = 0;  // leading blocks of `table` the executor's side holds as they are
    // Leading blocks of `table` a fork may share (n > 1: parent and child hold the prompt's blocks
    // together); only these can need a copy before a write. Blocks shared through the prefix cache
    // are full and registered, and nothing writes them again.
    int32_t fork_shared = 0;
    int32_t num_computed = 0;
    int32_t num_committed = 0;  // positions whose K/V a successful step wrote (or a cache hit)
    uint64_t generation = 0;    // this incarnation (a preempted id comes back as a new one)
    int32_t num_hashed = 0;     // leading full blocks registered in the prefix cache
    uint64_t last_hash = 0;     // hash of block num_hashed - 1 (salt when num_hashed is 0)
    uint64_t salt = 0;          // sampling_params::cache_salt: the first block's parent hash
    bool known_to_executor = false;
    bool registration_queued = false;  // an entry of this incarnation waits in to_register_
    // Sent with the sequence's first scheduled step (apart: read once, and large next to the
    // fields every step reads).
    std::unique_ptr<new_seq> announce;
  };

  void free_table(seq_kv& s);
  void preempt(seq_id_t id, step_plan& plan, step_allocation& alloc);
  void fork(draft_fork& f);
  int32_t lookup_prefix(seq_kv& s);
  int32_t blocks_needed(const seq_kv& s, int32_t n) const;
  void grow(seq_kv& s, int32_t n, step_plan& plan);
  // Tokens known: positions [0, known).
  static int32_t num_known(const seq_kv& s) noexcept {
    return s.tokens_base + static_cast<int32_t>(s.tokens.size());
  }
  // The known token at `pos` (tokens_base <= pos < num_known).
  static int32_t token_at(const seq_kv& s, int32_t pos) noexcept {
    return s.tokens[static_cast<size_t>(pos - s.tokens_base)];
  }
  // The tokens of block i (known, at or after tokens_base).
  std::span<const int32_t> block_tokens(const seq_kv& s, int32_t i) const noexcept {
    const int32_t bs = pool_.block_size();
    return {s.tokens.data() + static_cast<ptrdiff_t>(i * bs - s.tokens_base),
            static_cast<size_t>(bs)};
  }
  // Drops the window's leading tokens no longer read (see seq_kv::tokens).
  void trim_tokens(seq_kv& s) const;
  // Leading full blocks whose K/V is committed and whose tokens are known.
  int32_t full_blocks_committed(const seq_kv& s) const {
    return std::min(s.num_committed, num_known(s)) / pool_.block_size();
  }
  // Registers s's committed full blocks not yet registered, at most `budget`; returns how many.
  int32_t register_full_blocks(seq_kv& s, int32_t budget = INT32_MAX);
  // Queues s for registration when it has committed full blocks not yet registered (once: a
  // sequence has at most one entry in the queue).
  void queue_registration(seq_id_t id, seq_kv& s);
  // Registers queued blocks (to_register_), at most `budget`.
  void register_queued(int32_t budget);
  void schedule(seq_id_t id, seq_kv& s, int32_t n, int32_t num_tokens, int32_t cached,
                std::span<const int32_t> proposals, step_plan& plan, step_allocation& alloc);

  block_pool pool_;
  id_map<seq_kv> seqs_;
  std::vector<seq_id_t> holders_;    // admission order; back() is the newest
  std::vector<seq_id_t> drop_next_;  // released, known to the executor: drop at the next plan
  std::vector<int32_t> scratch_;     // one block of tokens (hashing)
  struct step_write {
    seq_id_t id;
    uint64_t generation;
    int32_t end;  // num_computed after the step
  };
  // Steps resolved whose outcome is not known, oldest first: what each computes. Their vectors are
  // kept for reuse (spare_), so a step allocates none once the batch has been seen.
  struct pending_step {
    uint64_t step_id = 0;
    std::vector<step_write> writes;
  };
  std::vector<pending_step> pending_;
  // A successful step's writes: the blocks they fill enter the prefix cache.
  void commit(const std::vector<step_write>& writes);
  std::vector<std::vector<step_write>> spare_;
  std::vector<step_write>* writes_ = nullptr;  // the step being resolved (null outside resolve)
  uint64_t next_generation_ = 1;
  // Sequences whose committed full blocks wait to be registered (a successful step's writes), in
  // commit order from to_register_head_; an entry of a sequence released (or reborn) since is
  // skipped by its generation.
  struct to_register {
    seq_id_t id;
    uint64_t generation;
  };
  std::vector<to_register> to_register_;
  size_t to_register_head_ = 0;
  static constexpr int32_t k_register_per_step = 32;
};

}  // namespace coserve::actors
