// Structured outputs: the grammar's allowed-token bitmask applied to the logits (see kernels.hpp).
// The CPU reference is apply_grammar_mask (model/structured_output.hpp).
#pragma once

#include <cmath>

#include "gpu/kernels.hpp"
#include "gpu/kernels/common.cuh"

namespace coserve::gpu {
namespace kern {

// ---- kernels ----
// grid (ceil(words / 256), num_rows): one thread per 32-bit word, which writes the <= 32 logits it
// covers; a word with every bit set (the common case inside free text) writes nothing.
__global__ void token_bitmask_kernel(float* __restrict__ logits, const int32_t* __restrict__ rows,
                                     const uint32_t* __restrict__ masks, int32_t words,
                                     int32_t vocab) {
  const int32_t w = blockIdx.x * blockDim.x + threadIdx.x;
  if (w >= words) return;
  const uint32_t bits = masks[int64_t(blockIdx.y) * words + w];
  if (bits == 0xffffffffu) return;
  float* row = logits + int64_t(rows[blockIdx.y]) * vocab;
  const int32_t base = w * 32;
#pragma unroll 4
  for (int32_t b = 0; b < 32; ++b)
    if (base + b < vocab && !((bits >> b) & 1u)) row[base + b] = -INFINITY;
}

}  // namespace kern

// ---- launchers ----
result<void> launch_token_bitmask(float* logits, const int32_t* rows, const uint32_t* masks,
                                  int32_t num_rows, int32_t words, int32_t vocab,
                                  cudaStream_t stream) {
  if (num_rows < 0 || words < 0 || vocab <= 0 || int64_t(words) * 32 < vocab)
    return make_error("invalid_argument", "token_bitmask: bad shape");
  if (num_rows == 0) return {};
  const dim3 grid(unsigned((words + 255) / 256), unsigned(num_rows));
  kern::token_bitmask_kernel<<<grid, 256, 0, stream>>>(logits, rows, masks, words, vocab);
  return kern::check_launch("token_bitmask_kernel");
}

}  // namespace coserve::gpu
