// executor_actor's interface: run one step_plan (the CPU or CUDA executor behind it).
#pragma once

#include "model/step.hpp"

namespace coserve::actors {

// kv_allocator → executor. step_id 0: no forward, only `finished` (drop sequence state), no answer.
struct execute_step {
  step_plan plan;
};

}  // namespace coserve::actors
