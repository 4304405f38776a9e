// SwiGLU activation: silu(gate) * up. CPU reference: gpu/reference/elementwise_ref.hpp
// (silu_mul_ref).
#pragma once

#include "gpu/kernels.hpp"
#include "gpu/kernels/common.cuh"

namespace coserve::gpu {
namespace kern {

// ---- kernels ----
// Grid-stride over num_tokens * inter outputs; fp32 math, one rounding.
__global__ void silu_mul_kernel(bf16* __restrict__ out, const bf16* __restrict__ gu, int64_t n,
                                int32_t inter) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = k / inter, j = k % inter;
    const float g = to_f(gu[t * 2 * inter + j]);
    const float u = to_f(gu[t * 2 * inter + inter + j]);
    out[k] = to_bf(g / (1.0f + expf(-g)) * u);
  }
}

}  // namespace kern

// ---- launchers ----
result<void> launch_silu_mul(bf16* out, const bf16* gate_up, int32_t num_tokens, int32_t inter,
                             cudaStream_t stream) {
  if (inter <= 0 || num_tokens < 0) return make_error("invalid_argument", "silu_mul: bad shape");
  const int64_t n = int64_t(num_tokens) * inter;
  if (n == 0) return {};
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 65535);
  kern::silu_mul_kernel<<<unsigned(blocks), 256, 0, stream>>>(out, gate_up, n, inter);
  return kern::check_launch("silu_mul_kernel");
}

}  // namespace coserve::gpu
