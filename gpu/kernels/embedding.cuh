// Embedding lookup. CPU reference: gpu/reference/elementwise_ref.hpp (embedding_ref).
#pragma once

#include "gpu/kernels.hpp"
#include "gpu/kernels/common.cuh"

namespace coserve::gpu {
namespace kern {

// ---- kernels ----
// One block per token; 16-byte vectors when hidden % 8 == 0 (checked by the launcher).
__global__ void embedding_kernel(bf16* __restrict__ out, const bf16* __restrict__ table,
                                 const int32_t* __restrict__ ids, int32_t hidden, int32_t vocab) {
  const int32_t t = blockIdx.x;
  const int32_t id = ids[t];
  uint4* dst = reinterpret_cast<uint4*>(out + int64_t(t) * hidden);
  const int32_t nvec = hidden / 8;
  if (id < 0 || id >= vocab) {
    for (int32_t i = threadIdx.x; i < nvec; i += blockDim.x) dst[i] = make_uint4(0, 0, 0, 0);
    return;
  }
  const uint4* src = reinterpret_cast<const uint4*>(table + int64_t(id) * hidden);
  for (int32_t i = threadIdx.x; i < nvec; i += blockDim.x) dst[i] = src[i];
}

}  // namespace kern

// ---- launchers ----
result<void> launch_embedding(bf16* out, const bf16* table, const int32_t* ids, int32_t num_tokens,
                              int32_t hidden, int32_t vocab, cudaStream_t stream) {
  if (hidden % 8 != 0 || num_tokens < 0 || vocab <= 0)
    return make_error("invalid_argument", "embedding: hidden must be a multiple of 8");
  if (num_tokens == 0) return {};
  kern::embedding_kernel<<<num_tokens, 128, 0, stream>>>(out, table, ids, hidden, vocab);
  return kern::check_launch("embedding_kernel");
}

}  // namespace coserve::gpu
