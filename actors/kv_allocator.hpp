// kv_allocator — owns the KV cache's blocks (kv_manager over a block_pool). Each kv_step from the
// scheduler first applies the step planner's kv_ops (blocks of finished sequences freed, step
// outcomes registering or dropping their blocks in the prefix cache), then places the draft in
// blocks (prefix-cache hits, copy-on-write, preemption by recompute) and sends the plan with its
// allocation to the executor, which returns the allocation to the scheduler. Publishes block usage
// and prefix hit counters, and, with a KV-event publisher, the prefix cache's events of each step
// as one batch. Resets and lists the prefix cache on request.
//
// Sends to: the executor (run_step); the KV-event publisher's queue (not an actor).
//
// Threads: an actor on the runtime's pool.
#pragma once

#include "actors/engine_shared.hpp"
#include "actors/executor_messages.hpp"
#include "actors/kv_allocator_messages.hpp"
#include "actors/kv_event_publisher.hpp"
#include "actors/kv_manager.hpp"
#include "runtime/actor.hpp"
#include "runtime/outbox.hpp"

namespace coserve::actors {

class kv_allocator {
 public:
  using messages = kv_allocator_protocol::messages;

  struct links {
    rt::actor_ref<executor_protocol> executor;
    std::shared_ptr<kv_event_publisher> events;  // none: events are not recorded
  };
  kv_allocator(std::shared_ptr<engine_shared> shared, links to, block_pool_options opts);
  rt::maybe_async handle(kv_step& m);
  void handle(reset_prefix_cache& m);
  void handle(list_cached_blocks& m);

 private:
  void publish();
  std::shared_ptr<engine_shared> shared_;
  links to_;
  kv_manager kv_;
};

}  // namespace coserve::actors
