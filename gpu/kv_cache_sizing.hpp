// Sizing the paged KV cache from gpu_memory_utilization (vLLM's rule): the executor may use
// `utilization * total` bytes of the device; what is already in use (weights, the CUDA context,
// other processes), the activation workspace and a safety margin come off that, and the rest
// becomes KV blocks. Plain arithmetic, tested on the CPU.
#pragma once

#include <cstdint>

#include "base/result.hpp"

namespace coserve::gpu {

struct kv_cache_shape {
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 16;
  int32_t elem_bytes = 2;  // bf16
};

// Bytes of one block across all layers, K and V: 2 * layers * block_size * kv_heads * head_dim *
// elem.
inline int64_t kv_block_bytes(const kv_cache_shape& s) {
  return 2 * int64_t(s.num_layers) * s.block_size * s.num_kv_heads * s.head_dim * s.elem_bytes;
}

struct kv_budget_input {
  int64_t total_bytes = 0;    // device memory (cudaMemGetInfo total)
  int64_t free_bytes = 0;     // free now, after weights and workspace are allocated
  double utilization = 0.9;   // fraction of total this executor may use, (0, 1]
  int64_t reserve_bytes = 0;  // kept free on top (cuBLASLt workspace growth, graphs, fragmentation)
};

// Number of KV blocks that fit; an error (resource_exhausted) when not even one block fits, or
// invalid_argument for a utilization outside (0, 1].
inline result<int64_t> kv_cache_num_blocks(const kv_cache_shape& s, const kv_budget_input& in) {
  if (!(in.utilization > 0.0 && in.utilization <= 1.0))
    return make_error("invalid_argument", "gpu_memory_utilization must be in (0, 1]");
  const int64_t block = kv_block_bytes(s);
  if (block <= 0) return make_error("invalid_argument", "kv cache shape has a zero dimension");
  const int64_t used = in.total_bytes - in.free_bytes;
  const int64_t allowed = int64_t(double(in.total_bytes) * in.utilization);
  int64_t budget = allowed - used - in.reserve_bytes;
  if (budget > in.free_bytes - in.reserve_bytes) budget = in.free_bytes - in.reserve_bytes;
  const int64_t blocks = budget > 0 ? budget / block : 0;
  if (blocks < 1)
    return make_error(
        "resource_exhausted",
        "no memory left for the KV cache: raise gpu_memory_utilization or use a smaller model");
  return blocks;
}

}  // namespace coserve::gpu
