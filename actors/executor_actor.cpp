#include "actors/executor_actor.hpp"

#include <algorithm>

#include "actors/scheduler.hpp"
#include "runtime/outbox.hpp"
#include "runtime/system.hpp"

namespace coserve::actors {

void executor_actor::on_start(rt::actor_context<executor_actor>& ctx) {
  trace_id_ = ctx.self.cell().trace_id();
  self_ = ctx.self;
  steps_trace_id_ = ctx.sys->trace().register_actor(ctx.name() + " steps");
}

rt::maybe_async executor_actor::handle(execute_step& m) {
  p_->fault_point("executor", "execute_step");
  waiting_.push_back(std::move(m.plan));
  launch_waiting();
  return {};
}

void executor_actor::launch_waiting() {
  auto& tr = p_->sys->trace();
  const size_t max_in_flight = size_t(std::max(1, exec_->max_in_flight()));
  while (!waiting_.empty()) {
    step_plan& plan = waiting_.front();
    if (!in_flight_.empty() &&
        (in_flight_.size() >= max_in_flight || !exec_->can_launch_ahead(plan)))
      break;
    failed_.filter(plan);
    in_flight f;
    f.step_id = plan.step_id;
    f.launched_ns = tr.now_ns();
    for (const scheduled_seq& s : plan.seqs) f.seqs.push_back(s.seq_id);
    f.finished = plan.finished;
    if (tr.enabled() && plan.step_id != 0) {
      for (const scheduled_seq& s : plan.seqs) f.requests.push_back(request_of(s.seq_id));
      std::sort(f.requests.begin(), f.requests.end());
      f.requests.erase(std::unique(f.requests.begin(), f.requests.end()), f.requests.end());
    }
    if (in_flight_.empty()) {
      p_->metrics.step_started_ns.store(std::max<int64_t>(f.launched_ns, 1),
                                        std::memory_order_relaxed);
    } else if (!f.seqs.empty()) {
      p_->metrics.steps_launched_ahead.fetch_add(1, std::memory_order_relaxed);
    }
    in_flight_.push_back(std::move(f));
    // The callback only posts a message back here (it runs on this actor's executor).
    exec_->launch(std::move(plan), self_.executor(),
                  [self = self_] { (void)self.tell(step_ready{}); });
    waiting_.pop_front();
  }
}

rt::maybe_async executor_actor::handle(step_ready&) {
  auto& tr = p_->sys->trace();
  if (in_flight_.empty()) return {};
  in_flight f = std::move(in_flight_.front());
  in_flight_.pop_front();
  result<step_result> r = exec_->collect();
  const int64_t t1 = tr.now_ns();
  // The next launched step (if any) has been running since this one completed.
  p_->metrics.step_started_ns.store(in_flight_.empty() ? 0 : std::max<int64_t>(t1, 1),
                                    std::memory_order_relaxed);
  failed_.on_step(f.seqs, f.finished, r.ok());
  rt::outbox out;
  const int64_t ran_from = std::max(f.launched_ns, last_done_ns_);
  last_done_ns_ = t1;
  if (f.step_id != 0) {  // step 0 only dropped finished sequences: nobody waits for it
    if (tr.enabled()) {
      rt::span s;
      s.message = "step";
      s.enqueue_ns = f.launched_ns;
      s.start_ns = ran_from;
      s.end_ns = t1;
      s.actor_id = steps_trace_id_;
      tr.record(s);
    }
    for (uint64_t rid : f.requests)
      trace_for_request(*p_->sys, trace_id_, "execute_step", rid, f.launched_ns, t1);
    out.tell(p_->scheduler_ref, step_done{f.step_id, std::move(r), !f.seqs.empty()});
  }
  launch_waiting();
  return out.finish();
}

}  // namespace coserve::actors
