// RMSNorm with the residual add fused in (vLLM's fused_add_rms_norm order), and the per-head
// RMSNorm of q and k (Qwen3). CPU references: gpu/reference/elementwise_ref.hpp (rmsnorm_ref,
// head_rmsnorm_ref).
#pragma once

#include "gpu/kernels.hpp"
#include "gpu/kernels/common.cuh"

namespace coserve::gpu {
namespace kern {

// ---- kernels ----
// One block per output row; the row (hidden <= 8192 * 2 per thread pass) is read twice from L1/L2:
// once for the sum of squares (storing z to residual), once to normalize.
__global__ void rmsnorm_kernel(bf16* __restrict__ out, const bf16* x, bf16* residual,
                               const bf16* __restrict__ w, const int32_t* __restrict__ rows,
                               int32_t hidden, float eps, int add_residual) {
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

// One warp per (token, head): the head's head_dim values (<= 32 * 8 per lane pass) are read once
// into registers, summed across the warp, scaled and written back in place.
__global__ void head_rmsnorm_kernel(bf16* qkv, const bf16* __restrict__ q_w,
                                    const bf16* __restrict__ k_w, int64_t num_tokens,
                                    int32_t q_heads, int32_t kv_heads, int32_t head_dim,
                                    int64_t row_stride, float eps) {
  constexpr int32_t k_per_lane = 8;  // head_dim <= 256
  const int32_t heads = q_heads + kv_heads;
  const int64_t item = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (item >= num_tokens * heads) return;  // whole warps leave together
  const int32_t lane = threadIdx.x & 31;
  const int64_t t = item / heads;
  const int32_t h = int32_t(item % heads);
  bf16* v = qkv + t * row_stride + int64_t(h) * head_dim;
  const bf16* w = h < q_heads ? q_w : k_w;
  float x[k_per_lane];
  float ss = 0.0f;
#pragma unroll
  for (int32_t k = 0; k < k_per_lane; ++k) {
    const int32_t j = lane + 32 * k;
    x[k] = j < head_dim ? to_f(v[j]) : 0.0f;
    ss += x[k] * x[k];
  }
  ss = warp_sum(ss);
  const float inv = rsqrtf(ss / float(head_dim) + eps);
#pragma unroll
  for (int32_t k = 0; k < k_per_lane; ++k) {
    const int32_t j = lane + 32 * k;
    if (j < head_dim) v[j] = to_bf(to_f(w[j]) * (x[k] * inv));
  }
}

}  // namespace kern

// ---- launchers ----
result<void> launch_rmsnorm(bf16* out, const bf16* x, bf16* residual, const bf16* weight,
                            const int32_t* rows, int32_t num_rows, int32_t hidden, float eps,
                            bool add_residual, cudaStream_t stream) {
  if (hidden <= 0 || num_rows < 0 || (add_residual && residual == nullptr))
    return make_error("invalid_argument", "rmsnorm: bad shape or add_residual without a residual");
  if (rows != nullptr && out == x)
    return make_error("invalid_argument", "rmsnorm: gathered output may not alias x");
  if (num_rows == 0) return {};
  kern::rmsnorm_kernel<<<num_rows, 256, 0, stream>>>(out, x, residual, weight, rows, hidden, eps,
                                                     add_residual ? 1 : 0);
  return kern::check_launch("rmsnorm_kernel");
}

result<void> launch_head_rmsnorm(bf16* qkv, const bf16* q_weight, const bf16* k_weight,
                                 int32_t num_tokens, int32_t num_q_heads, int32_t num_kv_heads,
                                 int32_t head_dim, float eps, cudaStream_t stream) {
  if (head_dim <= 0 || head_dim > 256 || num_q_heads <= 0 || num_kv_heads <= 0 || num_tokens < 0)
    return make_error("invalid_argument", "head_rmsnorm: bad shape (head_dim 1..256)");
  if (num_tokens == 0) return {};
  constexpr int32_t warps = 4;
  const int64_t items = int64_t(num_tokens) * (num_q_heads + num_kv_heads);
  const int64_t row = int64_t(num_q_heads + 2 * num_kv_heads) * head_dim;
  kern::head_rmsnorm_kernel<<<unsigned((items + warps - 1) / warps), warps * 32, 0, stream>>>(
      qkv, q_weight, k_weight, num_tokens, num_q_heads, num_kv_heads, head_dim, row, eps);
  return kern::check_launch("head_rmsnorm_kernel");
}

}  // namespace coserve::gpu
