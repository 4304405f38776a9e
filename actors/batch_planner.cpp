#include "actors/batch_planner.hpp"

namespace coserve::actors {

std::pair<step_plan, step_allocation> batch_planner::draft_and_place() {
  return kv_.resolve(planner_.draft());
}

void batch_planner::on_allocation(const step_allocation& alloc) {
  planner_.on_allocation(alloc, scratch_);
  kv_.apply(planner_.take_kv_ops());
  scratch_ = {};
}

step_plan batch_planner::plan() {
  auto [plan, alloc] = draft_and_place();
  if (alloc.step_id != 0) on_allocation(alloc);
  tables_.expand(plan);
  return std::move(plan);
}

std::vector<seq_event> batch_planner::on_result(const step_result& result) {
  step_emission out;
  planner_.on_result(result, out);
  kv_.apply(planner_.take_kv_ops());
  return std::move(out.tokens);
}

}  // namespace coserve::actors
