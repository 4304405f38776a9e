// executor_actor's interface: run step_plans on the CPU or CUDA executor behind it.
#pragma once

#include "model/step.hpp"

namespace coserve::actors {

// kv_allocator → executor. step_id 0: no forward, only `finished` (drop sequence state), no answer.
struct execute_step {
  step_plan plan;
};

// executor → itself: the oldest launched step has completed and can be collected (posted by the
// executor's completion callback: a CUDA host function's post, or the CPU step thread's).
struct step_ready {};

}  // namespace coserve::actors
