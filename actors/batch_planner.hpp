// batch_planner — the scheduler core and the KV allocator core composed synchronously: one call
// drafts a step, places it in KV blocks and returns the executor's step_plan. The actor graph runs
// the two cores in two actors (scheduler, kv_allocator); this composition serves single-threaded
// tests and the pipeline benchmark, and behaves the same.
//
// Threads: none.
#pragma once

#include <cstdint>
#include <vector>

#include "actors/block_pool.hpp"
#include "actors/kv_manager.hpp"
#include "actors/scheduler_core.hpp"

namespace coserve::actors {

class batch_planner {
 public:
  batch_planner(planner_config config, block_pool_options pool_options)
      : sched_(config), kv_(std::move(pool_options)) {}

  void add(sequence seq) { sched_.add(std::move(seq)); }
  // Ends a sequence now: its blocks are freed and the executor is told at the next plan.
  void finish(seq_id_t id, finish_reason reason) {
    if (sched_.finish(id, reason)) kv_.release(id);
  }
  // The next step (possibly empty: no sequences, only executor notices).
  step_plan plan();
  // A step's result: its blocks enter the prefix cache, its tokens go to the scheduler core.
  std::vector<seq_event> on_result(const step_result& result);
  // A step that failed: its blocks never enter the prefix cache (its sequences are left to the
  // caller to finish).
  void on_failed_step(uint64_t step_id) { kv_.step_outcome(step_id, false); }

  // True while sequences run or wait, or the executor still has to drop finished ones.
  bool has_work() const noexcept { return sched_.has_work() || kv_.has_drops(); }
  int32_t num_running() const noexcept { return sched_.num_running(); }
  int32_t num_waiting() const noexcept { return sched_.num_waiting(); }
  int64_t num_preemptions() const noexcept { return sched_.num_preemptions(); }
  const sequence* find(seq_id_t id) const { return sched_.find(id); }
  // The block table of a sequence holding blocks (nullptr otherwise).
  const std::vector<int32_t>* block_table(seq_id_t id) const { return kv_.block_table(id); }
  block_pool& pool() noexcept { return kv_.pool(); }
  const block_pool& pool() const noexcept { return kv_.pool(); }

 private:
  scheduler_core sched_;
  kv_manager kv_;
};

}  // namespace coserve::actors
