// kv_allocator's interface: place a step in KV blocks; free a sequence's blocks.
#pragma once

#include <cstdint>
#include <vector>

#include "actors/step_draft.hpp"

namespace coserve::actors {

// scheduler → kv_allocator: resolve the draft, answer with step_allocated, send the plan on.
struct kv_step {
  step_draft draft;
};

// scheduler → kv_allocator: how a step ended. Blocks a step filled enter the prefix cache only
// when it succeeded (sent before any release of the same step's sequences).
struct kv_step_outcome {
  uint64_t step_id = 0;
  bool ok = false;
};

// scheduler → kv_allocator: finished or cancelled sequences; their blocks are freed now.
struct kv_release {
  std::vector<seq_id_t> seqs;
};

}  // namespace coserve::actors
