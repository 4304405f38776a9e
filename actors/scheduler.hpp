// scheduler — the home of the step loop. It runs the step planner (actors/step_planner.hpp: which
// sequences run, how many tokens each, the failure and never-fits rules) and keeps two steps in
// flight: one turn of the loop is `step()` on each step_done from the executor —
//
//   collect  the allocations of the plans the executor received, then the step's tokens (or its
//            failure), into the planner;
//   emit     the sampled tokens and ended requests to the streamer;
//   plan     the next drafts (with the blocks to free and the steps' outcomes) to the KV allocator,
//            which allocates and launches them on the executor.
//
// A decode step is handled four times: kv_step (KV allocator), run_step (executor), step_done
// (here), token_batch (streamer).
//
// Sends to: the KV allocator (kv_step), the streamer (token_batch, end_request).
//
// Threads: an actor on the runtime's pool. Each draft is traced as a "plan_step" span.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "actors/engine_shared.hpp"
#include "actors/kv_allocator_messages.hpp"
#include "actors/scheduler_messages.hpp"
#include "actors/step_planner.hpp"
#include "actors/streamer_messages.hpp"
#include "runtime/actor.hpp"
#include "runtime/outbox.hpp"

namespace coserve::actors {

class scheduler {
 public:
  using messages = scheduler_protocol::messages;

  struct links {
    rt::actor_ref<kv_allocator_protocol> kv_allocator;
    rt::actor_ref<streamer_protocol> streamer;
  };
  // `journal`, when set, hears every call made on the planner, in order (tests).
  scheduler(std::shared_ptr<engine_shared> shared, links to, planner_config cfg,
            std::function<void(const planner_call&)> journal = {})
      : shared_(std::move(shared)),
        to_(std::move(to)),
        planner_(std::move(cfg)),
        journal_(std::move(journal)) {}
  void on_start(rt::actor_context<scheduler>& ctx) {
    trace_id_ = ctx.self.cell().trace_id();
    if (journal_) journal_({.what = planner_call::kind::start, .config = planner_.config()});
  }

  rt::maybe_async handle(add_request& m);
  rt::maybe_async handle(cancel_sequences& m);
  rt::maybe_async handle(finish_sequence& m);
  rt::maybe_async handle(step_done& m);
  rt::maybe_async handle(engine_failed& m);
  void handle(list_requests& m);

 private:
  // One turn of the step loop (see the header comment).
  void step(step_done& m, rt::outbox& out);
  void collect(step_done& m, step_emission& em);
  void emit(step_emission& em, uint64_t step_id, rt::outbox& out);
  void plan(rt::outbox& out);
  // The engine's health turns failed (the planner has ended `ended` requests with the reason).
  void mark_failed(const std::string& reason, size_t ended);
  void publish();

  std::shared_ptr<engine_shared> shared_;
  links to_;
  step_planner planner_;
  std::function<void(const planner_call&)> journal_;
  uint32_t trace_id_ = 0;
};

// "verify 2/3 accepted": a static name per (proposed, accepted) for the trace's spans.
const char* verify_span_name(int32_t proposed, int32_t accepted);

}  // namespace coserve::actors
