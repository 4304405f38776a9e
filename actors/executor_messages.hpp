// executor_actor's protocol: run step plans on the CPU or CUDA executor behind it.
#pragma once

#include <optional>

#include "actors/step_draft.hpp"
#include "model/step.hpp"
#include "runtime/message.hpp"

namespace coserve::actors {

// kv_allocator → executor: a step plan, and the allocation the scheduler needs to draft the next
// step (the executor returns it with its next step_done, or at once when no earlier step is
// running). plan.step_id 0: no forward, only `finished` (drop sequence state), no result.
struct run_step {
  step_plan plan;
  std::optional<step_allocation> allocation;
};

struct executor_protocol {
  using messages = rt::message_list<run_step>;
};

}  // namespace coserve::actors
