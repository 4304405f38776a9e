// Per-row dynamic fp8 (E4M3) quantization: weights per output channel at load, activations per
// token before each fp8 GEMM (vLLM's dynamic per-token scheme). CPU reference:
// gpu/reference/elementwise_ref.hpp (quantize_rows_e4m3_ref).
#pragma once

#include <cuda_fp8.h>

#include "gpu/kernels.hpp"
#include "gpu/kernels/common.cuh"

namespace coserve::gpu {
namespace kern {

// ---- kernels ----
// One block per row: the row's absolute maximum, scale = max(amax / 448, k_fp8_min_scale), then
// codes = e4m3(x / scale) rounded to nearest even and saturated to +-448.
__global__ void quantize_rows_e4m3_kernel(const bf16* __restrict__ x, int32_t cols, uint8_t* __restrict__ codes,
                                          float* __restrict__ scales) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const bf16* xr = x + r * cols;
  float amax = 0.0f;
  for (int32_t j = threadIdx.x; j < cols; j += blockDim.x) amax = fmaxf(amax, fabsf(to_f(xr[j])));
  amax = block_max(amax, scratch);
  const float scale = fmaxf(amax / 448.0f, k_fp8_min_scale);
  uint8_t* cr = codes + r * cols;
  for (int32_t j = threadIdx.x; j < cols; j += blockDim.x)
    cr[j] = uint8_t(__nv_cvt_float_to_fp8(__fdiv_rn(to_f(xr[j]), scale), __NV_SATFINITE, __NV_E4M3));
  if (threadIdx.x == 0) scales[r] = scale;
}

// Few rows (decode at small batches): y[t, n] = bf16(w_scales[n] * sum_c e4m3(w[n, c]) * x[t, c]
// + bias[n]), the activations read in bf16 as they are. One warp per k_fp8_gemv_warp_rows output
// rows, each lane streaming 16 weight bytes per row at a time (two chunks in flight), T rows of x
// from the cache; fp32 accumulation, then a warp reduction.
inline constexpr int k_fp8_gemv_warp_rows = 2;
inline constexpr int k_fp8_gemv_warps = 8;

__device__ __forceinline__ void e4m3x16_to_f32(const uint4& v, float (&f)[16]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(words[i] & 0xffffu), __NV_E4M3);
    const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(words[i] >> 16), __NV_E4M3);
    const float2 a = __half22float2(__half2(lo)), b = __half22float2(__half2(hi));
    f[4 * i] = a.x, f[4 * i + 1] = a.y, f[4 * i + 2] = b.x, f[4 * i + 3] = b.y;
  }
}

template <int T>
__global__ void __launch_bounds__(k_fp8_gemv_warps * 32)
    fp8_gemv_kernel(bf16* __restrict__ y, const bf16* __restrict__ x, const uint8_t* __restrict__ w,
                    const float* __restrict__ w_scales, const bf16* __restrict__ bias, int32_t n, int32_t k) {
  constexpr int R = k_fp8_gemv_warp_rows;
  const int32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int32_t row0 = (int32_t(blockIdx.x) * k_fp8_gemv_warps + warp) * R;
  if (row0 >= n) return;
  const int32_t chunks = k / 16;  // 16 weight bytes, 16 activations
  float acc[R][T];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < T; ++t) acc[r][t] = 0.0f;
  const uint4* wv[R];
#pragma unroll
  for (int r = 0; r < R; ++r) wv[r] = reinterpret_cast<const uint4*>(w + int64_t(min(row0 + r, n - 1)) * k);
#pragma unroll 2
  for (int32_t c = lane; c < chunks; c += 32) {
    uint4 wq[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wq[r] = __ldcs(wv[r] + c);  // streamed once: keep it out of L1
    float xf[T][16];
#pragma unroll
    for (int t = 0; t < T; ++t) {
      const uint4* xr = reinterpret_cast<const uint4*>(x + int64_t(t) * k + int64_t(c) * 16);
      const uint4 a = __ldg(xr), b = __ldg(xr + 1);
      const uint32_t words[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        xf[t][2 * i] = __uint_as_float(words[i] << 16);
        xf[t][2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float wf[16];
      e4m3x16_to_f32(wq[r], wf);
#pragma unroll
      for (int t = 0; t < T; ++t)
#pragma unroll
        for (int i = 0; i < 16; ++i) acc[r][t] = fmaf(wf[i], xf[t][i], acc[r][t]);
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
    const float sc = w_scales[row], b = bias != nullptr ? to_f(bias[row]) : 0.0f;
#pragma unroll
    for (int t = 0; t < T; ++t) y[int64_t(t) * n + row] = to_bf(fmaf(acc[r][t], sc, b));
  }
}

}  // namespace kern

// ---- launchers ----
result<void> launch_fp8_gemv(bf16* y, const bf16* x, const uint8_t* w, const float* w_scales, const bf16* bias,
                             int32_t m, int32_t n, int32_t k, cudaStream_t stream) {
  if (m < 1 || m > k_fp8_gemv_max_rows || n <= 0 || k <= 0 || k % 16 != 0)
    return make_error("invalid_argument", "fp8_gemv: needs 1.." + std::to_string(k_fp8_gemv_max_rows) +
                                              " rows and k a multiple of 16");
  const unsigned blocks =
      unsigned((n + kern::k_fp8_gemv_warps * kern::k_fp8_gemv_warp_rows - 1) / (kern::k_fp8_gemv_warps * kern::k_fp8_gemv_warp_rows));
  auto go = [&](auto kernel) { kernel<<<blocks, kern::k_fp8_gemv_warps * 32, 0, stream>>>(y, x, w, w_scales, bias, n, k); };
  switch (m) {
    case 1: go(kern::fp8_gemv_kernel<1>); break;
    case 2: go(kern::fp8_gemv_kernel<2>); break;
    case 3: go(kern::fp8_gemv_kernel<3>); break;
    case 4: go(kern::fp8_gemv_kernel<4>); break;
    case 5: go(kern::fp8_gemv_kernel<5>); break;
    case 6: go(kern::fp8_gemv_kernel<6>); break;
    case 7: go(kern::fp8_gemv_kernel<7>); break;
    default: go(kern::fp8_gemv_kernel<8>); break;
  }
  return kern::check_launch("fp8_gemv_kernel");
}

result<void> launch_quantize_rows_e4m3(uint8_t* codes, float* scales, const bf16* x, int64_t rows, int32_t cols,
                                       cudaStream_t stream) {
  if (cols <= 0 || rows < 0 || rows > int64_t(INT32_MAX)) return make_error("invalid_argument", "quantize_rows_e4m3: bad shape");
  if (rows == 0) return {};
  kern::quantize_rows_e4m3_kernel<<<unsigned(rows), 256, 0, stream>>>(x, cols, codes, scales);
  return kern::check_launch("quantize_rows_e4m3_kernel");
}

}  // namespace coserve::gpu
