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
__global__ void quantize_rows_e4m3_kernel(const bf16* __restrict__ x, int32_t cols,
                                          uint8_t* __restrict__ codes, float* __restrict__ scales) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const bf16* xr = x + r * cols;
  float amax = 0.0f;
  for (int32_t j = threadIdx.x; j < cols; j += blockDim.x) amax = fmaxf(amax, fabsf(to_f(xr[j])));
  amax = block_max(amax, scratch);
  const float scale = fmaxf(amax / 448.0f, k_fp8_min_scale);
  uint8_t* cr = codes + r * cols;
  for (int32_t j = threadIdx.x; j < cols; j += blockDim.x)
    cr[j] =
        uint8_t(__nv_cvt_float_to_fp8(__fdiv_rn(to_f(xr[j]), scale), __NV_SATFINITE, __NV_E4M3));
  if (threadIdx.x == 0) scales[r] = scale;
}

}  // namespace kern

// ---- launchers ----
result<void> launch_quantize_rows_e4m3(uint8_t* codes, float* scales, const bf16* x, int64_t rows,
                                       int32_t cols, cudaStream_t stream) {
  if (cols <= 0 || rows < 0 || rows > int64_t(INT32_MAX))
    return make_error("invalid_argument", "quantize_rows_e4m3: bad shape");
  if (rows == 0) return {};
  kern::quantize_rows_e4m3_kernel<<<unsigned(rows), 256, 0, stream>>>(x, cols, codes, scales);
  return kern::check_launch("quantize_rows_e4m3_kernel");
}

}  // namespace coserve::gpu
