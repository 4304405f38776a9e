// Embedding lookup (input ids resolved from the per-sequence last-token buffer where the host left
// a reference) and the scatter of sampled ids into that buffer. CPU reference:
// gpu/reference/elementwise_ref.hpp (embedding_ref, on ids resolved on the host).
#pragma once

#include "gpu/kernels.hpp"
#include "gpu/kernels/common.cuh"

namespace coserve::gpu {
namespace kern {

// ---- kernels ----
// One block per token; 16-byte vectors when hidden % 8 == 0 (checked by the launcher).
__global__ void embedding_kernel(bf16* __restrict__ out, const bf16* __restrict__ table,
                                 const int32_t* __restrict__ ids,
                                 const int32_t* __restrict__ last_tokens, int32_t hidden,
                                 int32_t vocab) {
  const int32_t t = blockIdx.x;
  int32_t id = ids[t];
  if (id < 0 && last_tokens != nullptr) id = last_tokens[-id - 1];
  uint4* dst = reinterpret_cast<uint4*>(out + int64_t(t) * hidden);
  const int32_t nvec = hidden / 8;
  if (id < 0 || id >= vocab) {
    for (int32_t i = threadIdx.x; i < nvec; i += blockDim.x) dst[i] = make_uint4(0, 0, 0, 0);
    return;
  }
  const uint4* src = reinterpret_cast<const uint4*>(table + int64_t(id) * hidden);
  for (int32_t i = threadIdx.x; i < nvec; i += blockDim.x) dst[i] = src[i];
}

// last_tokens[slots[r]] = tokens[r] for r < n.
__global__ void scatter_tokens_kernel(int32_t* __restrict__ last_tokens,
                                      const int32_t* __restrict__ slots,
                                      const int32_t* __restrict__ tokens, int32_t n) {
  const int32_t r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < n && slots[r] >= 0) last_tokens[slots[r]] = tokens[r];
}

}  // namespace kern

// ---- launchers ----
result<void> launch_embedding(bf16* out, const bf16* table, const int32_t* ids,
                              const int32_t* last_tokens, int32_t num_tokens, int32_t hidden,
                              int32_t vocab, cudaStream_t stream) {
  if (hidden % 8 != 0 || num_tokens < 0 || vocab <= 0)
    return make_error("invalid_argument", "embedding: hidden must be a multiple of 8");
  if (num_tokens == 0) return {};
  kern::embedding_kernel<<<num_tokens, 128, 0, stream>>>(out, table, ids, last_tokens, hidden,
                                                         vocab);
  return kern::check_launch("embedding_kernel");
}

result<void> launch_scatter_tokens(int32_t* last_tokens, const int32_t* slots,
                                   const int32_t* tokens, int32_t n, cudaStream_t stream) {
  if (n < 0) return make_error("invalid_argument", "scatter_tokens: negative count");
  if (n == 0) return {};
  kern::scatter_tokens_kernel<<<(n + 127) / 128, 128, 0, stream>>>(last_tokens, slots, tokens, n);
  return kern::check_launch("scatter_tokens_kernel");
}

}  // namespace coserve::gpu
