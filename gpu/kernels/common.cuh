// Device helpers shared by the kernel families: bf16 loads/stores and warp/block reductions.
// Included only by gpu/kernels.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

#include "gpu/cuda_error.hpp"
#include "gpu/kernels.hpp"

namespace coserve::gpu::kern {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float to_f(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ bf16 to_bf(float x) { return __float2bfloat16_rn(x); }

// KV cache elements (gpu/kernels.hpp, kv_elem): value i of a cache array stored from fp32 (fp8:
// nearest even, saturated), and values i, i + 1 (i even) widened to bf16, which is exact for fp8.
template <kv_elem KV>
__device__ __forceinline__ void store_kv(void* base, int64_t i, float v) {
  if constexpr (KV == kv_elem::bf16) {
    static_cast<bf16*>(base)[i] = to_bf(v);
  } else {
    constexpr __nv_fp8_interpretation_t fmt = KV == kv_elem::fp8_e4m3 ? __NV_E4M3 : __NV_E5M2;
    static_cast<uint8_t*>(base)[i] = uint8_t(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, fmt));
  }
}
template <kv_elem KV>
__device__ __forceinline__ __nv_bfloat162 load_kv2(const void* base, int64_t i) {
  if constexpr (KV == kv_elem::bf16) {
    return *reinterpret_cast<const __nv_bfloat162*>(static_cast<const bf16*>(base) + i);
  } else {
    constexpr __nv_fp8_interpretation_t fmt = KV == kv_elem::fp8_e4m3 ? __NV_E4M3 : __NV_E5M2;
    const auto raw =
        *reinterpret_cast<const __nv_fp8x2_storage_t*>(static_cast<const uint8_t*>(base) + i);
    const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(raw, fmt)));
    return __floats2bfloat162_rn(f.x, f.y);
  }
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide sum; every thread gets the result. `scratch` holds 32 floats; blockDim.x % 32 == 0.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < nw ? scratch[lane] : 0.0f;
  return warp_sum(r);
}
// Block-wide sum of 64-bit integers (exact: independent of the order); `scratch` holds 32 words.
__device__ __forceinline__ unsigned long long block_sum_u64(unsigned long long v,
                                                            unsigned long long* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  unsigned long long r = lane < nw ? scratch[lane] : 0ull;
  for (int o = 16; o > 0; o >>= 1) r += __shfl_xor_sync(0xffffffffu, r, o);
  return r;
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < nw ? scratch[lane] : -FLT_MAX;
  return warp_max(r);
}

// Launch check for launchers: reports a bad configuration without synchronizing.
inline result<void> check_launch(const char* what) { return cuda_check(cudaGetLastError(), what); }

}  // namespace coserve::gpu::kern
