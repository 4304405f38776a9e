// Sparse logits processors (penalties, logit_bias, min_tokens), see gpu/logit_edit.hpp, whose
// apply_logit_edit is also the CPU reference.
#pragma once

#include "gpu/kernels.hpp"
#include "gpu/kernels/common.cuh"
#include "gpu/logit_edit.hpp"

namespace coserve::gpu {
namespace kern {

// ---- kernels ----
// One thread per edit; edits are unique per (row, token), so writes never collide.
__global__ void logit_edits_kernel(float* __restrict__ logits, const logit_edit* __restrict__ edits, int32_t n,
                                   int32_t vocab) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const logit_edit e = edits[i];
  float* l = logits + int64_t(e.row) * vocab + e.token;
  *l = apply_logit_edit(*l, e);
}

}  // namespace kern

// ---- launchers ----
result<void> launch_logit_edits(float* logits, const logit_edit* edits, int32_t n, int32_t vocab, cudaStream_t stream) {
  if (n < 0 || vocab <= 0) return make_error("invalid_argument", "logit_edits: bad shape");
  if (n == 0) return {};
  kern::logit_edits_kernel<<<unsigned((n + 255) / 256), 256, 0, stream>>>(logits, edits, n, vocab);
  return kern::check_launch("logit_edits_kernel");
}

}  // namespace coserve::gpu
