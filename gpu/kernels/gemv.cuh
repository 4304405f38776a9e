// Matrix-vector products for steps of few rows (decodes at small batches): y [m, n] =
// x [m, k] . w [n, k]^T (* per-row weight scales) + bias, weights streamed once from memory with
// 16-byte loads, x (bf16) from the cache, fp32 accumulation. Weights in E4M3 (fp8, with a scale
// per output row) or bf16. CPU reference: the double products in tests/gpu/test_gemm.cpp.
#pragma once

#include <cuda_fp8.h>

#include "gpu/kernels.hpp"
#include "gpu/kernels/common.cuh"

namespace coserve::gpu {
namespace kern {

// ---- kernels ----
// One warp per k_gemv_warp_rows output rows; each lane loads 16 weight bytes per row at a time
// (two loads in flight with the unrolled loop) and the matching x columns of every row.
inline constexpr int k_gemv_warp_rows = 2;
inline constexpr int k_gemv_warps = 8;

__device__ __forceinline__ void widen_e4m3x16(const uint4& v, float* f) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __half2_raw lo =
        __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(words[i] & 0xffffu), __NV_E4M3);
    const __half2_raw hi =
        __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(words[i] >> 16), __NV_E4M3);
    const float2 a = __half22float2(__half2(lo)), b = __half22float2(__half2(hi));
    f[4 * i] = a.x, f[4 * i + 1] = a.y, f[4 * i + 2] = b.x, f[4 * i + 3] = b.y;
  }
}

// 8 bf16 values (16 bytes) to fp32: a bf16 is the top half of its fp32.
__device__ __forceinline__ void widen_bf16x8(const uint4& v, float* f) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(words[i] << 16);
    f[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}

// FP8: w is E4M3 with w_scales per row; else bf16 (w_scales unused).
template <int T, bool FP8>
__global__ void __launch_bounds__(k_gemv_warps * 32)
    gemv_kernel(bf16* __restrict__ y, const bf16* __restrict__ x, const void* __restrict__ w,
                const float* __restrict__ w_scales, const bf16* __restrict__ bias, int32_t n,
                int32_t k) {
  constexpr int R = k_gemv_warp_rows;
  constexpr int E = FP8 ? 16 : 8;  // weights per 16-byte load
  const int32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int32_t row0 = (int32_t(blockIdx.x) * k_gemv_warps + warp) * R;
  if (row0 >= n) return;
  const int32_t chunks = k / E;
  const int64_t row_bytes = int64_t(k) * (FP8 ? 1 : 2);
  float acc[R][T];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < T; ++t) acc[r][t] = 0.0f;
  const uint4* wv[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    wv[r] = reinterpret_cast<const uint4*>(static_cast<const char*>(w) +
                                           int64_t(min(row0 + r, n - 1)) * row_bytes);
#pragma unroll 2
  for (int32_t c = lane; c < chunks; c += 32) {
    uint4 wq[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wq[r] = __ldcs(wv[r] + c);  // streamed once: keep it out of L1
    float xf[T][E];
#pragma unroll
    for (int t = 0; t < T; ++t) {
      const uint4* xr = reinterpret_cast<const uint4*>(x + int64_t(t) * k + int64_t(c) * E);
#pragma unroll
      for (int h = 0; h < E / 8; ++h) widen_bf16x8(__ldg(xr + h), &xf[t][8 * h]);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float wf[E];
      if constexpr (FP8)
        widen_e4m3x16(wq[r], wf);
      else
        widen_bf16x8(wq[r], wf);
#pragma unroll
      for (int t = 0; t < T; ++t)
#pragma unroll
        for (int i = 0; i < E; ++i) acc[r][t] = fmaf(wf[i], xf[t][i], acc[r][t]);
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < T; ++t) acc[r][t] = warp_sum(acc[r][t]);
  if (lane != 0) return;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int32_t row = row0 + r;
    if (row >= n) break;
    const float sc = FP8 ? w_scales[row] : 1.0f, b = bias != nullptr ? to_f(bias[row]) : 0.0f;
#pragma unroll
    for (int t = 0; t < T; ++t) y[int64_t(t) * n + row] = to_bf(fmaf(acc[r][t], sc, b));
  }
}

template <bool FP8>
result<void> launch_gemv(bf16* y, const bf16* x, const void* w, const float* w_scales,
                         const bf16* bias, int32_t m, int32_t n, int32_t k, cudaStream_t stream) {
  constexpr int32_t E = FP8 ? 16 : 8;
  const char* name = FP8 ? "fp8_gemv" : "bf16_gemv";
  if (m < 1 || m > k_gemv_max_rows || n <= 0 || k <= 0 || k % E != 0)
    return make_error("invalid_argument", std::string(name) + ": needs 1.." +
                                              std::to_string(k_gemv_max_rows) +
                                              " rows and k a multiple of " + std::to_string(E));
  constexpr int32_t rows_per_block = k_gemv_warps * k_gemv_warp_rows;
  const unsigned blocks = unsigned((n + rows_per_block - 1) / rows_per_block);
  auto go = [&](auto kernel) {
    kernel<<<blocks, k_gemv_warps * 32, 0, stream>>>(y, x, w, w_scales, bias, n, k);
  };
  switch (m) {
    case 1:
      go(gemv_kernel<1, FP8>);
      break;
    case 2:
      go(gemv_kernel<2, FP8>);
      break;
    case 3:
      go(gemv_kernel<3, FP8>);
      break;
    case 4:
      go(gemv_kernel<4, FP8>);
      break;
    case 5:
      go(gemv_kernel<5, FP8>);
      break;
    case 6:
      go(gemv_kernel<6, FP8>);
      break;
    case 7:
      go(gemv_kernel<7, FP8>);
      break;
    default:
      go(gemv_kernel<8, FP8>);
      break;
  }
  return check_launch(FP8 ? "gemv_kernel<fp8>" : "gemv_kernel<bf16>");
}

}  // namespace kern

// ---- launchers ----
result<void> launch_fp8_gemv(bf16* y, const bf16* x, const uint8_t* w, const float* w_scales,
                             const bf16* bias, int32_t m, int32_t n, int32_t k,
                             cudaStream_t stream) {
  return kern::launch_gemv<true>(y, x, w, w_scales, bias, m, n, k, stream);
}

result<void> launch_bf16_gemv(bf16* y, const bf16* x, const bf16* w, const bf16* bias, int32_t m,
                              int32_t n, int32_t k, cudaStream_t stream) {
  return kern::launch_gemv<false>(y, x, w, nullptr, bias, m, n, k, stream);
}

}  // namespace coserve::gpu
