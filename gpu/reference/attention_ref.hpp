// CPU reference of paged causal attention (gpu/kernels/attention.cuh): plain softmax in double per
// (query token, head) over the sequence's paged keys, no tiling, no splits. Uses the batch_plan's
// per-sequence arrays, so it also checks the planner's block tables and lengths.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gpu/batch_plan.hpp"
#include "model/dtype.hpp"

namespace coserve::gpu::ref {

// q [num_tokens, q_stride] (heads at h * head_dim); caches [num_blocks, block_size, kv_heads,
// head_dim]. window > 0: the query at position p sees keys (p - window, p] only. Returns out
// [num_tokens, num_q_heads * head_dim] as float (compare with bf16 tolerance).
inline std::vector<float> attention_ref(const std::vector<uint16_t>& q, int64_t q_stride,
                                        const std::vector<uint16_t>& k_cache,
                                        const std::vector<uint16_t>& v_cache, const batch_plan& p,
                                        int32_t num_q_heads, int32_t num_kv_heads, int32_t head_dim,
                                        int32_t block_size, float scale, int32_t window = 0) {
  const int32_t gqa = num_q_heads / num_kv_heads;
  std::vector<float> out(size_t(p.num_tokens) * size_t(num_q_heads) * size_t(head_dim), 0.0f);
  std::vector<double> s;
  for (int32_t i = 0; i < p.num_seqs; ++i) {
    const int32_t q0 = p.cu_seqlens_q[size_t(i)], q_len = p.cu_seqlens_q[size_t(i) + 1] - q0;
    const int32_t kv_len = p.kv_lens[size_t(i)];
    const int32_t* table = p.block_tables.data() + p.block_table_offsets[size_t(i)];
    for (int32_t t = 0; t < q_len; ++t) {
      const int32_t pos = kv_len - q_len + t;
      for (int32_t h = 0; h < num_q_heads; ++h) {
        const int32_t kvh = h / gqa;
        const uint16_t* qr =
            q.data() + size_t(q0 + t) * size_t(q_stride) + size_t(h) * size_t(head_dim);
        s.assign(size_t(pos) + 1, 0.0);
        double mx = -1e300;
        const int32_t first = window > 0 ? std::max(0, pos - window + 1) : 0;  // sliding window
        for (int32_t j = 0; j <= pos; ++j) {
          if (j < first) {
            s[size_t(j)] = -INFINITY;
            continue;
          }
          const size_t slot =
              size_t(table[j / block_size]) * size_t(block_size) + size_t(j % block_size);
          const uint16_t* kr =
              k_cache.data() + (slot * size_t(num_kv_heads) + size_t(kvh)) * size_t(head_dim);
          double d = 0.0;
          for (int32_t c = 0; c < head_dim; ++c)
            d += double(bf16_to_f32(qr[c])) * bf16_to_f32(kr[c]);
          s[size_t(j)] = d * scale;
          mx = std::max(mx, s[size_t(j)]);
        }
        double den = 0.0;
        for (auto& v : s) den += (v = std::exp(v - mx));
        float* o =
            out.data() + (size_t(q0 + t) * size_t(num_q_heads) + size_t(h)) * size_t(head_dim);
        for (int32_t c = 0; c < head_dim; ++c) {
          double acc = 0.0;
          for (int32_t j = 0; j <= pos; ++j) {
            const size_t slot =
                size_t(table[j / block_size]) * size_t(block_size) + size_t(j % block_size);
            acc +=
                s[size_t(j)] *
                bf16_to_f32(v_cache[(slot * size_t(num_kv_heads) + size_t(kvh)) * size_t(head_dim) +
                                    size_t(c)]);
          }
          o[c] = float(acc / den);
        }
      }
    }
  }
  return out;
}

}  // namespace coserve::gpu::ref
