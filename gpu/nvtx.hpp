// nvtx_range: an NVTX range (push on construction, pop on destruction) naming a phase of the
// executor's host work in an Nsight Systems timeline. NVTX 3 is header-only; without a tool
// attached each call is a no-op behind one branch.
#pragma once

#include <nvtx3/nvToolsExt.h>

namespace coserve::gpu {

class nvtx_range {
 public:
  explicit nvtx_range(const char* name) noexcept { nvtxRangePushA(name); }
  ~nvtx_range() { nvtxRangePop(); }
  nvtx_range(const nvtx_range&) = delete;
  nvtx_range& operator=(const nvtx_range&) = delete;
};

}  // namespace coserve::gpu
