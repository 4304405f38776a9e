#include "actors/kv_allocator.hpp"

namespace coserve::actors {

kv_allocator::kv_allocator(std::shared_ptr<engine_shared> shared, links to, block_pool_options opts)
    : shared_(std::move(shared)), to_(std::move(to)), kv_(std::move(opts)) {
  shared_->metrics.kv_total.store(kv_.pool().num_blocks(), std::memory_order_relaxed);
  publish();
}

void kv_allocator::publish() {
  auto& m = shared_->metrics;
  m.kv_free.store(kv_.pool().num_free(), std::memory_order_relaxed);
  m.kv_cached_free.store(kv_.pool().num_cached_free(), std::memory_order_relaxed);
  m.prefix_queries.store(kv_.pool().prefix_queries(), std::memory_order_relaxed);
  m.prefix_hits.store(kv_.pool().prefix_hits(), std::memory_order_relaxed);
}

rt::maybe_async kv_allocator::handle(kv_step& m) {
  shared_->fault_point("kv_allocator", "kv_step");
  rt::outbox out;
  const bool drafted = m.draft.step_id != 0;
  auto [plan, alloc] = kv_.resolve(std::move(m.draft));
  publish();
  if (plan.seqs.empty()) plan.step_id = 0;  // nothing to compute: the executor only drops state
  run_step run{std::move(plan), std::nullopt};
  if (drafted) run.allocation = std::move(alloc);
  if (drafted || !run.plan.finished.empty()) out.tell(to_.executor, std::move(run));
  return out.finish();
}

}  // namespace coserve::actors
