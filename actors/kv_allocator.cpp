#include "actors/kv_allocator.hpp"

#include "actors/executor_actor.hpp"
#include "actors/scheduler.hpp"

namespace coserve::actors {

kv_allocator::kv_allocator(std::shared_ptr<pipeline> p, block_pool_options opts)
    : p_(std::move(p)), kv_(std::move(opts)) {
  p_->metrics.kv_total.store(kv_.pool().num_blocks(), std::memory_order_relaxed);
  publish();
}

void kv_allocator::publish() {
  auto& m = p_->metrics;
  m.kv_free.store(kv_.pool().num_free(), std::memory_order_relaxed);
  m.kv_cached_free.store(kv_.pool().num_cached_free(), std::memory_order_relaxed);
  m.prefix_queries.store(kv_.pool().prefix_queries(), std::memory_order_relaxed);
  m.prefix_hits.store(kv_.pool().prefix_hits(), std::memory_order_relaxed);
}

rt::maybe_async kv_allocator::handle(kv_step& m) {
  p_->fault_point("kv_allocator", "kv_step");
  rt::outbox out;
  auto [plan, alloc] = kv_.resolve(std::move(m.draft));
  publish();
  const bool runs = !plan.seqs.empty();
  if (!runs) plan.step_id = 0;  // nothing to compute: the executor only drops state, silently
  // The scheduler hears of the allocation before the executor can possibly answer the step.
  out.tell(p_->scheduler_ref, step_allocated{std::move(alloc)});
  if (runs || !plan.finished.empty()) out.tell(p_->executor_ref, execute_step{std::move(plan)});
  return out.finish();
}

void kv_allocator::handle(kv_step_outcome& m) {
  p_->fault_point("kv_allocator", "kv_step_outcome");
  kv_.step_outcome(m.step_id, m.ok);
  publish();
}

rt::maybe_async kv_allocator::handle(kv_release& m) {
  p_->fault_point("kv_allocator", "kv_release");
  rt::outbox out;
  for (seq_id_t id : m.seqs) kv_.release(id);
  publish();
  if (kv_.has_drops()) {
    step_plan drop;
    drop.finished = kv_.take_drops();
    out.tell(p_->executor_ref, execute_step{std::move(drop)});
  }
  return out.finish();
}

}  // namespace coserve::actors
