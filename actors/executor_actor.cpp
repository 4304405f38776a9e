#include "actors/executor_actor.hpp"

#include <algorithm>

#include "actors/scheduler.hpp"
#include "runtime/outbox.hpp"
#include "runtime/system.hpp"

namespace coserve::actors {

rt::maybe_async executor_actor::handle(execute_step& m) {
  p_->fault_point("executor", "execute_step");
  auto& tr = p_->sys->trace();
  if (!failed_seqs_.empty())
    std::erase_if(m.plan.seqs, [this](const scheduled_seq& s) { return failed_seqs_.count(s.seq_id) != 0; });
  const int64_t t0 = tr.now_ns();
  p_->metrics.step_started_ns.store(std::max<int64_t>(t0, 1), std::memory_order_relaxed);
  result<step_result> r = exec_->execute(m.plan);
  p_->metrics.step_started_ns.store(0, std::memory_order_relaxed);
  const int64_t t1 = tr.now_ns();
  if (!r.ok())
    for (const scheduled_seq& s : m.plan.seqs) failed_seqs_.insert(s.seq_id);
  for (seq_id_t id : m.plan.finished) failed_seqs_.erase(id);
  rt::outbox out;
  if (m.plan.step_id == 0) return out.finish();  // only dropped finished sequences
  if (tr.enabled()) {
    requests_.clear();
    for (const scheduled_seq& s : m.plan.seqs) requests_.push_back(request_of(s.seq_id));
    std::sort(requests_.begin(), requests_.end());
    requests_.erase(std::unique(requests_.begin(), requests_.end()), requests_.end());
    for (uint64_t rid : requests_) trace_for_request(*p_->sys, trace_id_, "execute_step", rid, t0, t1);
  }
  out.tell(p_->scheduler_ref, step_done{m.plan.step_id, std::move(r), !m.plan.seqs.empty()});
  return out.finish();
}

}  // namespace coserve::actors
