// scheduler — continuous batching with two steps in flight. It owns the scheduler core (which
// sequences run, how many tokens each, in what order), sends each step's draft to the KV
// allocator, and while the executor runs step N it already drafts step N+1: the draft is made as
// soon as step N-1's result is in (or step N's allocation, when fewer than two are in flight).
// Sampled tokens go to the streamer as one token_batch per step; finished sequences' blocks go
// back to the KV allocator at once.
//
// Failures: a failed step ends only the requests that had sequences in it (the others go on);
// `max_consecutive_failures` failed steps in a row, or one error the executor marks fatal
// (executor_fatal: the device is unusable), fail the engine: every request ends with an error and
// new ones are refused. The KV allocator hears each step's outcome, so blocks a failed step wrote
// never enter the prefix cache.
//
// Threads: an actor on the runtime's pool. Each draft is traced as a "plan_step" span.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "actors/pipeline.hpp"
#include "actors/scheduler_core.hpp"
#include "actors/scheduler_messages.hpp"
#include "runtime/actor.hpp"
#include "runtime/outbox.hpp"

namespace coserve::actors {

class scheduler {
 public:
  using messages = rt::message_list<add_request, cancel_sequences, finish_sequence, step_allocated,
                                    step_done, engine_failed, list_requests>;

  scheduler(std::shared_ptr<pipeline> p, planner_config cfg, std::vector<int32_t> extra_eos,
            int32_t kv_blocks, int32_t max_consecutive_failures)
      : p_(std::move(p)),
        core_(cfg),
        extra_eos_(std::move(extra_eos)),
        kv_blocks_(kv_blocks),
        max_consecutive_failures_(std::max(1, max_consecutive_failures)) {}
  void on_start(rt::actor_context<scheduler>& ctx) { trace_id_ = ctx.self.cell().trace_id(); }

  rt::maybe_async handle(add_request& m);
  rt::maybe_async handle(cancel_sequences& m);
  rt::maybe_async handle(finish_sequence& m);
  rt::maybe_async handle(step_allocated& m);
  rt::maybe_async handle(step_done& m);
  rt::maybe_async handle(engine_failed& m);
  rt::maybe_async handle(list_requests& m);

 private:
  struct request {
    int32_t samples = 1;
    int32_t live = 1;
    bool queued = true;  // not scheduled yet (queue-time metric)
    std::chrono::steady_clock::time_point submitted;
  };
  void pump(rt::outbox& out);
  void end_request_now(uint64_t rid, finish_reason reason, const std::string& message,
                       rt::outbox& out);
  void sample_finished(uint64_t rid);
  // Ends every request with `reason` and refuses later ones.
  void fail_all(const std::string& reason, rt::outbox& out);
  void publish();

  std::shared_ptr<pipeline> p_;
  scheduler_core core_;
  std::vector<int32_t> extra_eos_;
  int32_t kv_blocks_;
  uint32_t trace_id_ = 0;
  int32_t in_flight_ = 0;  // steps drafted whose result has not come back
  std::unordered_map<uint64_t, request> requests_;
  std::unordered_map<uint64_t, std::vector<uint64_t>> step_requests_;  // step id → requests in it
  int32_t max_consecutive_failures_;
  int32_t consecutive_failures_ = 0;
  bool failed_ = false;
  std::string failed_reason_;
  std::vector<seq_id_t> release_;  // scratch
};

}  // namespace coserve::actors
