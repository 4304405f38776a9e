// kv_allocator's protocol: place a step in KV blocks (after the planner's kv_ops) and send it on.
#pragma once

#include "actors/step_draft.hpp"
#include "runtime/message.hpp"

namespace coserve::actors {

// scheduler → kv_allocator: the draft's kv_ops (released sequences, step outcomes) are applied,
// then the draft (when it has a step id) is placed in blocks, and the plan goes to the executor
// with its allocation; a draft without a step id sends the executor only what it has to drop.
struct kv_step {
  step_draft draft;
};

struct kv_allocator_protocol {
  using messages = rt::message_list<kv_step>;
};

}  // namespace coserve::actors
