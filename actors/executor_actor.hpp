// executor_actor — runs step plans on a model executor (CPU, or CUDA in gpu/), in the order the
// KV allocator sent them, and answers the scheduler with each step's sampled tokens. Each step is
// traced once as the actor's span and once per request in it.
//
// Launch / collect (model/executor.hpp): a plan is launched as soon as it arrives while fewer than
// the executor's max_in_flight() steps are outstanding (and the executor can take it ahead of the
// ones before it), so step N+1 is queued on the device (or the CPU step thread) while step N runs.
// The executor posts `step_ready` back to this actor when a step completes; the actor then
// collects it, answers the scheduler, and launches what waited. The actor's thread never blocks
// on a step. Trace: a track "<name> steps" holds one "step" span per step, from when it could start
// running (launched, and the step before it done) to its collection; each request in it gets an
// "execute_step" span on the actor's own track from launch to collection.
//
// After a failed step its sequences are left out of the steps launched behind it (their inputs
// depend on tokens the failed step never sampled, and the scheduler ends their requests): a
// failure never spreads to the requests of the next step. They stay left out until the KV
// allocator reports them finished.
#pragma once

#include <deque>
#include <memory>

#include "actors/executor_messages.hpp"
#include "actors/pipeline.hpp"
#include "model/executor.hpp"
#include "runtime/actor.hpp"

namespace coserve::actors {

class executor_actor {
 public:
  using messages = rt::message_list<execute_step, step_ready>;

  executor_actor(std::shared_ptr<pipeline> p, std::unique_ptr<executor> exec)
      : p_(std::move(p)), exec_(std::move(exec)) {}
  void on_start(rt::actor_context<executor_actor>& ctx);
  rt::maybe_async handle(execute_step& m);
  rt::maybe_async handle(step_ready& m);

 private:
  struct in_flight {
    uint64_t step_id = 0;
    int64_t launched_ns = 0;
    std::vector<seq_id_t> seqs;      // scheduled
    std::vector<seq_id_t> finished;  // dropped after it
    std::vector<uint64_t> requests;  // for the trace (empty when tracing is off)
  };
  void launch_waiting();

  std::shared_ptr<pipeline> p_;
  std::unique_ptr<executor> exec_;
  rt::actor_ref<executor_actor> self_;
  uint32_t trace_id_ = 0;
  uint32_t steps_trace_id_ = 0;      // the "executor steps" track: one "step" span per step
  int64_t last_done_ns_ = 0;         // when the step collected last completed (about)
  std::deque<step_plan> waiting_;    // arrived, not launched yet
  std::deque<in_flight> in_flight_;  // launched, not collected, in launch order
  failed_sequences failed_;          // seen at collect, applied to later launches
};

}  // namespace coserve::actors
