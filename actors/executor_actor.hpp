// executor_actor — runs step plans on a model executor (CPU, or CUDA in gpu/) on a thread of its
// own, one at a time, in the order the KV allocator sent them, and answers the scheduler with each
// step's sampled tokens. Each step is traced once as the actor's span and once per request in it.
//
// After a failed step its sequences are left out of the steps already queued behind it (their
// inputs depend on tokens the failed step never sampled, and the scheduler ends their requests):
// a failure never spreads to the requests of the next step. They stay left out until the KV
// allocator reports them finished.
#pragma once

#include <memory>
#include <unordered_set>

#include "actors/executor_messages.hpp"
#include "actors/pipeline.hpp"
#include "model/executor.hpp"
#include "runtime/actor.hpp"

namespace coserve::actors {

class executor_actor {
 public:
  using messages = rt::message_list<execute_step>;

  executor_actor(std::shared_ptr<pipeline> p, std::unique_ptr<executor> exec)
      : p_(std::move(p)), exec_(std::move(exec)) {}
  void on_start(rt::actor_context<executor_actor>& ctx) { trace_id_ = ctx.self.cell().trace_id(); }
  rt::maybe_async handle(execute_step& m);

 private:
  std::shared_ptr<pipeline> p_;
  std::unique_ptr<executor> exec_;
  uint32_t trace_id_ = 0;
  std::vector<uint64_t> requests_;  // scratch
  std::unordered_set<seq_id_t> failed_seqs_;  // in a failed step, not yet finished
};

}  // namespace coserve::actors
