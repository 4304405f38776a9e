// kv_allocator — owns the KV cache's blocks (kv_manager over a block_pool): places each step
// draft in blocks (prefix-cache hits, copy-on-write, preemption by recompute), answers the
// scheduler with the allocation, then sends the step_plan to the executor; frees the blocks of
// finished sequences as soon as it hears of them. Publishes block usage and prefix hit counters.
//
// Threads: an actor on the runtime's pool.
#pragma once

#include "actors/kv_allocator_messages.hpp"
#include "actors/kv_manager.hpp"
#include "actors/pipeline.hpp"
#include "runtime/actor.hpp"
#include "runtime/outbox.hpp"

namespace coserve::actors {

class kv_allocator {
 public:
  using messages = rt::message_list<kv_step, kv_step_outcome, kv_release>;

  kv_allocator(std::shared_ptr<pipeline> p, block_pool_options opts);
  rt::maybe_async handle(kv_step& m);
  void handle(kv_step_outcome& m);
  rt::maybe_async handle(kv_release& m);

 private:
  void publish();
  std::shared_ptr<pipeline> p_;
  kv_manager kv_;
};

}  // namespace coserve::actors
