// Launch-parameter selection for the attention kernels, as plain host arithmetic (tested on the
// CPU).
//
// The attention kernel (gpu/kernels/attention.cuh) runs one thread block per (work item, kv head).
// A block holds `q_tile` consecutive query tokens of one sequence times the `gqa` query heads that
// share the kv head, so every K/V tile loaded into shared memory serves q_tile * gqa query rows
// (the FlashAttention-2 loop order: queries outer, KV tiles inner, online softmax).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace coserve::gpu {

inline constexpr int32_t k_attn_warps = 8;     // warps per attention block
inline constexpr int32_t k_attn_kv_tile = 32;  // keys per shared-memory tile (one per lane)
inline constexpr int32_t k_attn_max_rows_per_warp = 4;  // register accumulators per lane, per row
inline constexpr int32_t k_attn_target_rows = 16;       // query rows per block we aim for
inline constexpr int32_t k_attn_min_split_kv = 256;     // keys per split at least

// Query tokens per block for a GQA ratio: 16 rows at most, at least one token.
inline int32_t attention_q_tile(int32_t gqa) {
  return std::max<int32_t>(1, k_attn_target_rows / std::max<int32_t>(1, gqa));
}

// Rows (query token, query head) per block; must fit k_attn_warps * k_attn_max_rows_per_warp.
inline int32_t attention_rows(int32_t gqa) { return attention_q_tile(gqa) * gqa; }
inline bool attention_supported(int32_t gqa, int32_t head_dim) {
  return gqa >= 1 && attention_rows(gqa) <= k_attn_warps * k_attn_max_rows_per_warp &&
         (head_dim == 32 || head_dim == 64 || head_dim == 96 || head_dim == 128);
}

// Dynamic shared memory of one attention block: q rows in fp32, K and V tiles in bf16 with each row
// padded by 2 elements (one 4-byte bank) so lanes reading different keys hit different banks.
inline size_t attention_smem_bytes(int32_t gqa, int32_t head_dim) {
  return size_t(attention_rows(gqa)) * head_dim * 4 +
         2 * size_t(k_attn_kv_tile) * (head_dim + 2) * 2;
}

// Number of KV splits for one sequence. Only single-tile queries (decodes, short chunks) are split:
// they would otherwise give too few blocks to fill the GPU when contexts are long. `base_blocks` is
// the number of blocks the whole batch launches without splitting; we aim for two blocks per SM.
inline int32_t choose_num_splits(int32_t q_len, int32_t kv_len, int32_t q_tile, int64_t base_blocks,
                                 int32_t num_sms, int32_t max_splits = 32) {
  if (q_len > q_tile || kv_len < 2 * k_attn_min_split_kv || num_sms <= 0) return 1;
  const int64_t target = 2 * int64_t(num_sms);
  if (base_blocks >= target) return 1;
  const int64_t want =
      (target + std::max<int64_t>(1, base_blocks) - 1) / std::max<int64_t>(1, base_blocks);
  const int64_t by_len = kv_len / k_attn_min_split_kv;
  return int32_t(std::clamp<int64_t>(std::min(want, by_len), 1, max_splits));
}

// 1-D grid for an elementwise kernel: `threads` per block, a grid that covers n items but is capped
// (the kernels use grid-stride loops).
struct grid_1d {
  uint32_t blocks = 1;
  uint32_t threads = 256;
};
inline grid_1d elementwise_grid(int64_t n, int32_t num_sms, uint32_t threads = 256) {
  const int64_t need = (n + threads - 1) / threads;
  const int64_t cap = std::max<int64_t>(1, int64_t(num_sms) * 16);
  return grid_1d{uint32_t(std::clamp<int64_t>(need, 1, cap)), threads};
}

// GEMM row-count buckets: cuBLASLt algorithms are timed once per bucket of M (the tokens of a step)
// and a step of M rows uses the choice of the first bucket >= M (gemm_runner). Powers of two from
// 1, then max_m (if not one of them), ascending.
inline std::vector<int32_t> gemm_m_buckets(int32_t max_m) {
  std::vector<int32_t> b;
  for (int64_t m = 1; m < max_m; m *= 2) b.push_back(int32_t(m));
  if (max_m >= 1) b.push_back(max_m);
  return b;
}

// Steps of at most this many tokens multiply by the GEMV kernels (launch_fp8_gemv /
// launch_bf16_gemv, gpu/kernels/gemv.cuh; 1..k_gemv_max_rows) instead of cuBLASLt; 0: never.
struct gemv_rows {
  int32_t fp8 = 8;   // E4M3 weights against the bf16 activations (W8A16), not the W8A8 GEMM
  int32_t bf16 = 0;  // off until a device measurement says the GEMV beats cuBLASLt
};

}  // namespace coserve::gpu
