// CPU reference of RoPE + paged KV write (gpu/kernels/rope_kv.cuh), same contract as
// launch_rope_kv_write: qkv rotated in place, k/v written to the caches at slot_mapping.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "model/dtype.hpp"

namespace coserve::gpu::ref {

// The options of rope_kv_args past the shapes (LongRoPE's second table, the cos/sin scale, partial
// rotary); the defaults are plain RoPE over the whole head.
struct rope_ref_opts {
  const std::vector<float>* inv_freq_long = nullptr;
  int32_t long_from = 0x7fffffff;
  float scale = 1.0f;
  int32_t rotary_dim = 0;
  bool rotate = true;  // false: no rotation, k and v written as they are
};

inline void rope_kv_ref(std::vector<uint16_t>& qkv, const std::vector<int32_t>& positions,
                        const std::vector<int32_t>& slot_mapping,
                        const std::vector<float>& inv_freq, std::vector<uint16_t>& k_cache,
                        std::vector<uint16_t>& v_cache, int32_t num_q_heads, int32_t num_kv_heads,
                        int32_t head_dim, const rope_ref_opts& o = {}) {
  const int32_t half = o.rotate ? (o.rotary_dim > 0 ? o.rotary_dim : head_dim) / 2 : 0;
  const size_t row = size_t(num_q_heads + 2 * num_kv_heads) * size_t(head_dim);
  for (size_t t = 0; t < positions.size(); ++t) {
    uint16_t* base = qkv.data() + t * row;
    const std::vector<float>& inv =
        o.inv_freq_long && positions[t] >= o.long_from ? *o.inv_freq_long : inv_freq;
    for (int32_t h = 0; h < num_q_heads + num_kv_heads; ++h)
      for (int32_t i = 0; i < half; ++i) {
        const float ang = float(positions[t]) * inv[size_t(i)];
        const float c = std::cos(ang) * o.scale, s = std::sin(ang) * o.scale;
        uint16_t* v = base + size_t(h) * size_t(head_dim);
        const float x1 = bf16_to_f32(v[i]), x2 = bf16_to_f32(v[i + half]);
        v[i] = f32_to_bf16(x1 * c - x2 * s);
        v[i + half] = f32_to_bf16(x2 * c + x1 * s);
      }
    const int32_t slot = slot_mapping[t];
    if (slot < 0) continue;
    const size_t kv = size_t(num_kv_heads) * size_t(head_dim);
    for (size_t k = 0; k < kv; ++k) {
      k_cache[size_t(slot) * kv + k] = base[size_t(num_q_heads) * size_t(head_dim) + k];
      v_cache[size_t(slot) * kv + k] =
          base[size_t(num_q_heads + num_kv_heads) * size_t(head_dim) + k];
    }
  }
}

}  // namespace coserve::gpu::ref
