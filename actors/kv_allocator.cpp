#include "actors/kv_allocator.hpp"

#include <chrono>

namespace coserve::actors {

namespace {
block_pool_options recording(block_pool_options opts, bool events) {
  opts.record_events = events;
  return opts;
}
}  // namespace

kv_allocator::kv_allocator(std::shared_ptr<engine_shared> shared, links to, block_pool_options opts)
    : shared_(std::move(shared)),
      to_(std::move(to)),
      kv_(recording(std::move(opts), to_.events != nullptr)) {
  shared_->metrics.kv_total.store(kv_.pool().num_blocks(), std::memory_order_relaxed);
  publish();
}

void kv_allocator::publish() {
  auto& m = shared_->metrics;
  m.kv_free.store(kv_.pool().num_free(), std::memory_order_relaxed);
  m.kv_cached_free.store(kv_.pool().num_cached_free(), std::memory_order_relaxed);
  m.prefix_queries.store(kv_.pool().prefix_queries(), std::memory_order_relaxed);
  m.prefix_hits.store(kv_.pool().prefix_hits(), std::memory_order_relaxed);
  if (to_.events == nullptr) return;
  std::vector<kv_cache_event> events = kv_.pool().take_events();
  if (events.empty()) return;
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  to_.events->publish(now, std::move(events));
}

void kv_allocator::handle(reset_prefix_cache& m) {
  const int32_t dropped = kv_.pool().reset_prefix_cache();
  publish();
  m.reply->complete(dropped);
}

void kv_allocator::handle(list_cached_blocks& m) {
  m.reply->complete(prefix_cache_listing{.block_size = kv_.pool().block_size(),
                                         .num_blocks = kv_.pool().num_blocks(),
                                         .blocks = kv_.pool().cached_blocks()});
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
