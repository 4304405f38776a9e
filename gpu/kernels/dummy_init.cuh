// Random weights generated on the device for --load-format dummy. CPU reference:
// gpu/reference/elementwise_ref.hpp (fill_random_ref).
#pragma once

#include "gpu/kernels.hpp"
#include "gpu/kernels/common.cuh"
#include "gpu/rng.hpp"

namespace coserve::gpu {
namespace kern {

// ---- kernels ----
__global__ void fill_random_kernel(bf16* __restrict__ d, int64_t n, float scale, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    d[i] = to_bf((2.0f * uniform01(seed, 0, uint64_t(i)) - 1.0f) * scale);
}
__global__ void fill_kernel(bf16* __restrict__ d, int64_t n, float v) {
  const bf16 b = to_bf(v);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    d[i] = b;
}

}  // namespace kern

// ---- launchers ----
result<void> launch_fill_random_bf16(bf16* data, int64_t n, float scale, uint64_t seed,
                                     cudaStream_t stream) {
  if (n < 0) return make_error("invalid_argument", "fill_random: negative size");
  if (n == 0) return {};
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 4096);
  kern::fill_random_kernel<<<unsigned(blocks), 256, 0, stream>>>(data, n, scale, seed);
  return kern::check_launch("fill_random_kernel");
}
result<void> launch_fill_bf16(bf16* data, int64_t n, float value, cudaStream_t stream) {
  if (n < 0) return make_error("invalid_argument", "fill: negative size");
  if (n == 0) return {};
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 4096);
  kern::fill_kernel<<<unsigned(blocks), 256, 0, stream>>>(data, n, value);
  return kern::check_launch("fill_kernel");
}

}  // namespace coserve::gpu
