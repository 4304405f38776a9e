#include "actors/executor_actor.hpp"

#include <algorithm>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <stdexcept>

#include "runtime/system.hpp"

namespace coserve::actors {

void executor_actor::on_start(rt::actor_context<executor_actor>& ctx) {
  if (!ctx.self.cell().options().dedicated_thread)
    throw std::logic_error("executor_actor must run on a dedicated thread");
  trace_id_ = ctx.self.cell().trace_id();
  thread_ = ctx.io_executor();
  steps_trace_id_ = ctx.sys->trace().register_track(ctx.name() + " steps");
}

void executor_actor::handle(run_step& m) {
  shared_->fault_point("executor", "run_step");
  tables_.expand(m.plan);  // in arrival order, which is step order
  // No earlier step running: this plan's allocation would otherwise wait for its own result.
  const bool earlier = !in_flight_.empty() || !waiting_.empty();
  if (m.allocation) allocations_.push_back(std::move(*m.allocation));
  if (!m.plan.seqs.empty() || !m.plan.finished.empty()) waiting_.push_back(std::move(m.plan));
  launch_waiting();
  if (!earlier && !allocations_.empty()) {
    send_to_scheduler(step_done{std::move(allocations_)});
    allocations_.clear();
  }
}

void executor_actor::launch_waiting() {
  auto& tr = shared_->sys->trace();
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
      shared_->metrics.step_started_ns.store(std::max<int64_t>(f.launched_ns, 1),
                                             std::memory_order_relaxed);
    } else if (!f.seqs.empty()) {
      shared_->metrics.steps_launched_ahead.fetch_add(1, std::memory_order_relaxed);
    }
    in_flight_.push_back(std::move(f));
    // The executor resumes this actor on its own thread once the step has completed.
    exec_->launch(std::move(plan), thread_, [this, alive = alive_] {
      if (*alive) on_step_complete();
    });
    waiting_.pop_front();
  }
}

void executor_actor::trace_step(const in_flight& f, int64_t ran_from, int64_t done_ns) {
  auto& tr = shared_->sys->trace();
  if (!tr.enabled()) return;
  rt::span s;
  s.message = "step";
  s.enqueue_ns = f.launched_ns;
  s.start_ns = ran_from;
  s.end_ns = done_ns;
  s.track_id = steps_trace_id_;
  tr.record(s);
  for (uint64_t rid : f.requests)
    trace_for_request(*shared_->sys, trace_id_, "execute_step", rid, f.launched_ns, done_ns);
}

void executor_actor::on_step_complete() {
  if (in_flight_.empty()) return;
  in_flight f = std::move(in_flight_.front());
  in_flight_.pop_front();
  result<step_result> r = exec_->collect();
  const int64_t t1 = shared_->sys->trace().now_ns();
  // The next launched step (if any) has been running since this one completed.
  shared_->metrics.step_started_ns.store(in_flight_.empty() ? 0 : std::max<int64_t>(t1, 1),
                                         std::memory_order_relaxed);
  failed_.on_step(f.seqs, f.finished, r.ok());
  const int64_t ran_from = std::max(f.launched_ns, last_done_ns_);
  last_done_ns_ = t1;
  // A step 0 only dropped finished sequences: nobody waits for it, but allocations may ride.
  if (f.step_id != 0) trace_step(f, ran_from, t1);
  if (f.step_id != 0 || !allocations_.empty()) {
    step_done d{std::move(allocations_), f.step_id, std::move(r), !f.seqs.empty()};
    allocations_.clear();
    send_to_scheduler(std::move(d));
  }
  launch_waiting();
}

void executor_actor::send_to_scheduler(step_done d) {
  if (backlog_.empty() && to_.scheduler.try_tell(d) != rt::send_status::full) return;
  backlog_.push_back(std::move(d));
  if (delivering_) return;
  delivering_ = true;
  asio::co_spawn(thread_, deliver_backlog(alive_), asio::detached);
}

asio::awaitable<void> executor_actor::deliver_backlog(std::shared_ptr<bool> alive) {
  const rt::actor_ref<scheduler_protocol> scheduler = to_.scheduler;
  while (*alive && !backlog_.empty()) {
    step_done d = std::move(backlog_.front());
    backlog_.pop_front();
    co_await scheduler.send(std::move(d));  // resumes on this thread; `this` may be gone then
  }
  if (*alive) delivering_ = false;
}

}  // namespace coserve::actors
