// kv_allocator's protocol: place a step in KV blocks (after the planner's kv_ops) and send it on.
#pragma once

#include <vector>

#include "actors/block_pool.hpp"
#include "actors/step_draft.hpp"
#include "runtime/message.hpp"
#include "runtime/reply.hpp"

namespace coserve::actors {

// scheduler → kv_allocator: the draft's kv_ops (released sequences, step outcomes) are applied,
// then the draft (when it has a step id) is placed in blocks, and the plan goes to the executor
// with its allocation; a draft without a step id sends the executor only what it has to drop.
struct kv_step {
  step_draft draft;
};

// The prefix cache as GET /api/prefix_cache lists it.
struct prefix_cache_listing {
  int32_t block_size = 0;
  int32_t num_blocks = 0;
  std::vector<block_pool::cached_block> blocks;  // by block number
};

// engine → kv_allocator: drop every cached block (POST /reset_prefix_cache); the reply is how
// many were dropped.
struct reset_prefix_cache {
  rt::reply_ptr<int32_t> reply;
};
// engine → kv_allocator: list the cached blocks.
struct list_cached_blocks {
  rt::reply_ptr<prefix_cache_listing> reply;
};

struct kv_allocator_protocol {
  using messages = rt::message_list<kv_step, reset_prefix_cache, list_cached_blocks>;
};

}  // namespace coserve::actors
