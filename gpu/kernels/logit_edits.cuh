// Sparse logits processors (penalties, logit_bias, min_tokens), see gpu/logit_edit.hpp, whose
// apply_logit_edit is also the CPU reference.
#pragma once

#include "gpu/kernels.hpp"
#include "gpu/kernels/common.cuh"
#include "gpu/logit_edit.hpp"

namespace coserve::gpu {
namespace kern {

// ---- kernels ----
// One thread per edit; edits are unique per (row, token), so writes never collide. A row with a
// pending token (pending_slot[row] >= 0) leaves that token's logit to pending_penalty_kernel.
__global__ void logit_edits_kernel(float* __restrict__ logits, const logit_edit* __restrict__ edits, int32_t n,
                                   int32_t vocab, const int32_t* __restrict__ pending_slot,
                                   const int32_t* __restrict__ last_tokens) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const logit_edit e = edits[i];
  if (pending_slot != nullptr && pending_slot[e.row] >= 0 && last_tokens[pending_slot[e.row]] == e.token) return;
  float* l = logits + int64_t(e.row) * vocab + e.token;
  *l = apply_logit_edit(*l, e);
}

// One thread per pending row: its pending token's logit with the edit counting that token.
__global__ void pending_penalty_kernel(float* __restrict__ logits, const logit_edit* __restrict__ edits,
                                       const pending_penalty* __restrict__ pending, int32_t n, int32_t vocab,
                                       const int32_t* __restrict__ last_tokens) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const pending_penalty pp = pending[i];
  const int32_t t = last_tokens[pp.slot];
  if (t < 0 || t >= vocab) return;
  float* l = logits + int64_t(pp.row) * vocab + t;
  *l = apply_logit_edit(*l, pending_edit(edits, pp, t));
}

}  // namespace kern

// ---- launchers ----
result<void> launch_logit_edits(float* logits, const logit_edit* edits, int32_t n, int32_t vocab, cudaStream_t stream,
                                const pending_penalty* pending, int32_t num_pending, const int32_t* pending_slot,
                                const int32_t* last_tokens) {
  if (n < 0 || vocab <= 0 || num_pending < 0 || (num_pending > 0 && (pending_slot == nullptr || last_tokens == nullptr)))
    return make_error("invalid_argument", "logit_edits: bad shape");
  if (n > 0) {
    kern::logit_edits_kernel<<<unsigned((n + 255) / 256), 256, 0, stream>>>(
        logits, edits, n, vocab, num_pending > 0 ? pending_slot : nullptr, last_tokens);
    COSERVE_CUDA_TRY(kern::check_launch("logit_edits_kernel"));
  }
  if (num_pending == 0) return {};
  kern::pending_penalty_kernel<<<unsigned((num_pending + 127) / 128), 128, 0, stream>>>(logits, edits, pending,
                                                                                      num_pending, vocab, last_tokens);
  return kern::check_launch("pending_penalty_kernel");
}

}  // namespace coserve::gpu
