#include "actors/batch_planner.hpp"

namespace coserve::actors {

step_plan batch_planner::plan() {
  step_draft d = sched_.draft();
  if (d.step_id == 0) {  // nothing to schedule: still hand the executor its notices
    auto [plan, alloc] = kv_.resolve(std::move(d));
    return std::move(plan);
  }
  auto [plan, alloc] = kv_.resolve(std::move(d));
  sched_.on_allocation(alloc);
  return std::move(plan);
}

std::vector<seq_event> batch_planner::on_result(const step_result& result) {
  kv_.step_outcome(result.step_id, true);
  std::vector<seq_event> events = sched_.on_result(result);
  for (const seq_event& e : events)
    if (e.finish != finish_reason::none) kv_.release(e.seq_id);
  return events;
}

}  // namespace coserve::actors
