// batch_planner — the step planner and the KV manager composed synchronously: one call drafts a
// step, places it in KV blocks and returns the executor's step_plan. The serving graph runs the
// same two cores in two actors (scheduler, kv_allocator), passing the draft (with the planner's
// kv_ops) and the allocation between them; this composition serves single-threaded tests, the
// check that the actor graph plans what it plans (tests/actors/test_step_loop_plans.cpp) and
// `coserve bench pipeline`.
//
// Threads: none.
#pragma once

#include <cstdint>
#include <vector>

#include "actors/block_pool.hpp"
#include "actors/kv_manager.hpp"
#include "actors/step_planner.hpp"
#include "model/held_block_tables.hpp"

namespace coserve::actors {

class batch_planner {
 public:
  batch_planner(planner_config config, block_pool_options pool_options)
      : planner_(std::move(config)), kv_(std::move(pool_options)) {}

  void add(sequence seq) { planner_.add(std::move(seq)); }
  // Ends a sequence now: its blocks are freed and the executor is told at the next plan.
  void finish(seq_id_t id, finish_reason reason) {
    if (planner_.finish(id, reason)) kv_.release(id);
  }
  // The next step (possibly empty: no sequences, only executor notices), with whole block tables
  // (as the executor actor hands it on).
  step_plan plan();
  // The parts of plan(), for an owner that applies allocations later (as the scheduler actor does
  // when they come back) or times them apart: the draft placed in blocks (its tables as changes),
  // its allocation applied, and the changes expanded into whole tables.
  std::pair<step_plan, step_allocation> draft_and_place();
  void on_allocation(const step_allocation& alloc);
  void expand_tables(step_plan& plan) { tables_.expand(plan); }
  // A step's result: its blocks enter the prefix cache, its tokens go to the step planner; the
  // blocks of sequences it finished are freed.
  std::vector<seq_event> on_result(const step_result& result);
  // A step that failed: its blocks never enter the prefix cache (its sequences are left to the
  // caller to finish).
  void on_failed_step(uint64_t step_id) { kv_.step_outcome(step_id, false); }

  // True while sequences run or wait, or the executor still has to drop finished ones.
  bool has_work() const noexcept { return planner_.has_work() || kv_.has_drops(); }
  int32_t num_running() const noexcept { return planner_.num_running(); }
  int32_t num_waiting() const noexcept { return planner_.num_waiting(); }
  int64_t num_preemptions() const noexcept { return planner_.num_preemptions(); }
  const sequence* find(seq_id_t id) const { return planner_.find(id); }
  // The block table of a sequence holding blocks (nullptr otherwise).
  const std::vector<int32_t>* block_table(seq_id_t id) const { return kv_.block_table(id); }
  block_pool& pool() noexcept { return kv_.pool(); }
  const block_pool& pool() const noexcept { return kv_.pool(); }
  step_planner& planner() noexcept { return planner_; }
  kv_manager& kv() noexcept { return kv_; }

 private:
  step_planner planner_;
  kv_manager kv_;
  step_emission scratch_;     // what on_allocation emits (ends of requests that never fit)
  held_block_tables tables_;  // the executor side's tables
};

}  // namespace coserve::actors
