// RMSNorm with the residual add fused in (vLLM's fused_add_rms_norm order). CPU reference:
// gpu/reference/elementwise_ref.hpp (rmsnorm_ref).
#pragma once

#include "gpu/kernels.hpp"
#include "gpu/kernels/common.cuh"

namespace coserve::gpu {
namespace kern {

// ---- kernels ----
// One block per output row; the row (hidden <= 8192 * 2 per thread pass) is read twice from L1/L2:
// once for the sum of squares (storing z to residual), once to normalize.
__global__ void rmsnorm_kernel(bf16* __restrict__ out, const bf16* x, bf16* residual, const bf16* __restrict__ w,
                               const int32_t* __restrict__ rows, int32_t hidden, float eps, int add_residual) {
  __shared__ float scratch[32];
  const int32_t i = blockIdx.x;
  const int64_t r = rows ? rows[i] : i;
  const bf16* xr = x + r * hidden;
  bf16* rr = residual ? residual + r * hidden : nullptr;
  float ss = 0.0f;
  for (int32_t j = threadIdx.x; j < hidden; j += blockDim.x) {
    float z = to_f(xr[j]);
    if (add_residual) z = to_f(to_bf(z + to_f(rr[j])));
    if (rr) rr[j] = to_bf(z);
    ss += z * z;
  }
  ss = block_sum(ss, scratch);
  const float inv = rsqrtf(ss / float(hidden) + eps);
  bf16* o = out + int64_t(i) * hidden;
  for (int32_t j = threadIdx.x; j < hidden; j += blockDim.x) {
    const float z = rr ? to_f(rr[j]) : to_f(xr[j]);  // same thread wrote rr[j]: no barrier needed
    o[j] = to_bf(to_f(w[j]) * (z * inv));
  }
}

}  // namespace kern

// ---- launchers ----
result<void> launch_rmsnorm(bf16* out, const bf16* x, bf16* residual, const bf16* weight, const int32_t* rows,
                            int32_t num_rows, int32_t hidden, float eps, bool add_residual, cudaStream_t stream) {
  if (hidden <= 0 || num_rows < 0 || (add_residual && residual == nullptr))
    return make_error("invalid_argument", "rmsnorm: bad shape or add_residual without a residual");
  if (rows != nullptr && out == x) return make_error("invalid_argument", "rmsnorm: gathered output may not alias x");
  if (num_rows == 0) return {};
  kern::rmsnorm_kernel<<<num_rows, 256, 0, stream>>>(out, x, residual, weight, rows, hidden, eps, add_residual ? 1 : 0);
  return kern::check_launch("rmsnorm_kernel");
}

}  // namespace coserve::gpu
