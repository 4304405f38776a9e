// CPU references of the elementwise kernel families (embedding, RMSNorm + residual, q/k head
// RMSNorm, SiLU*mul, dummy fill). Plain C++ over bf16 bit patterns (uint16_t), the same rounding
// points as the kernels.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "gpu/rng.hpp"
#include "model/dtype.hpp"

namespace coserve::gpu::ref {

inline float rb(float x) { return bf16_to_f32(f32_to_bf16(x)); }  // round through bf16

// out [ids.size(), hidden]; ids outside [0, vocab) give zeros.
inline std::vector<uint16_t> embedding_ref(const std::vector<uint16_t>& table,
                                           const std::vector<int32_t>& ids, int32_t hidden,
                                           int32_t vocab) {
  std::vector<uint16_t> out(ids.size() * size_t(hidden), 0);
  for (size_t t = 0; t < ids.size(); ++t)
    if (ids[t] >= 0 && ids[t] < vocab)
      for (int32_t j = 0; j < hidden; ++j)
        out[t * size_t(hidden) + size_t(j)] = table[size_t(ids[t]) * size_t(hidden) + size_t(j)];
  return out;
}

// Same contract as launch_rmsnorm; residual updated in place when non-null.
inline std::vector<uint16_t> rmsnorm_ref(const std::vector<uint16_t>& x,
                                         std::vector<uint16_t>* residual,
                                         const std::vector<uint16_t>& w,
                                         const std::vector<int32_t>* rows, int32_t num_rows,
                                         int32_t hidden, float eps, bool add_residual) {
  std::vector<uint16_t> out(size_t(num_rows) * size_t(hidden));
  std::vector<float> z(static_cast<size_t>(hidden));
  for (int32_t i = 0; i < num_rows; ++i) {
    const size_t r = size_t(rows ? (*rows)[size_t(i)] : i);
    double ss = 0.0;
    for (int32_t j = 0; j < hidden; ++j) {
      const size_t k = r * size_t(hidden) + size_t(j);
      float v = bf16_to_f32(x[k]);
      if (add_residual) v = rb(v + bf16_to_f32((*residual)[k]));
      if (residual) (*residual)[k] = f32_to_bf16(v);
      z[size_t(j)] = v;
      ss += double(v) * v;
    }
    const float inv = float(1.0 / std::sqrt(ss / hidden + eps));
    for (int32_t j = 0; j < hidden; ++j)
      out[size_t(i) * size_t(hidden) + size_t(j)] =
          f32_to_bf16(bf16_to_f32(w[size_t(j)]) * (z[size_t(j)] * inv));
  }
  return out;
}

// Same contract as launch_head_rmsnorm: q and k heads of qkv normalised in place.
inline void head_rmsnorm_ref(std::vector<uint16_t>& qkv, const std::vector<uint16_t>& q_w,
                             const std::vector<uint16_t>& k_w, int32_t num_tokens, int32_t q_heads,
                             int32_t kv_heads, int32_t head_dim, float eps) {
  const size_t row = size_t(q_heads + 2 * kv_heads) * size_t(head_dim);
  for (int32_t t = 0; t < num_tokens; ++t)
    for (int32_t h = 0; h < q_heads + kv_heads; ++h) {
      uint16_t* v = qkv.data() + size_t(t) * row + size_t(h) * size_t(head_dim);
      const std::vector<uint16_t>& w = h < q_heads ? q_w : k_w;
      double ss = 0.0;
      for (int32_t j = 0; j < head_dim; ++j) ss += double(bf16_to_f32(v[j])) * bf16_to_f32(v[j]);
      const float inv = float(1.0 / std::sqrt(ss / head_dim + eps));
      for (int32_t j = 0; j < head_dim; ++j)
        v[j] = f32_to_bf16(bf16_to_f32(w[size_t(j)]) * (bf16_to_f32(v[j]) * inv));
    }
}

// Same contract as launch_quantize_rows_e4m3 (min_scale: k_fp8_min_scale): codes [rows, cols],
// scales [rows].
inline void quantize_rows_e4m3_ref(const std::vector<uint16_t>& x, int64_t rows, int32_t cols,
                                   float min_scale, std::vector<uint8_t>& codes,
                                   std::vector<float>& scales) {
  codes.assign(size_t(rows) * size_t(cols), 0);
  scales.assign(size_t(rows), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    float amax = 0.0f;
    for (int32_t j = 0; j < cols; ++j)
      amax = std::fmax(amax, std::fabs(bf16_to_f32(x[size_t(r) * size_t(cols) + size_t(j)])));
    const float scale = std::fmax(amax / 448.0f, min_scale);
    scales[size_t(r)] = scale;
    for (int32_t j = 0; j < cols; ++j) {
      const size_t k = size_t(r) * size_t(cols) + size_t(j);
      codes[k] = f32_to_e4m3(bf16_to_f32(x[k]) / scale);
    }
  }
}

inline std::vector<uint16_t> silu_mul_ref(const std::vector<uint16_t>& gu, int32_t num_tokens,
                                          int32_t inter) {
  std::vector<uint16_t> out(size_t(num_tokens) * size_t(inter));
  for (int32_t t = 0; t < num_tokens; ++t)
    for (int32_t j = 0; j < inter; ++j) {
      const float g = bf16_to_f32(gu[size_t(t) * 2 * size_t(inter) + size_t(j)]);
      const float u = bf16_to_f32(gu[size_t(t) * 2 * size_t(inter) + size_t(inter) + size_t(j)]);
      out[size_t(t) * size_t(inter) + size_t(j)] = f32_to_bf16(g / (1.0f + std::exp(-g)) * u);
    }
  return out;
}

inline std::vector<uint16_t> fill_random_ref(int64_t n, float scale, uint64_t seed) {
  std::vector<uint16_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    out[size_t(i)] = f32_to_bf16((2.0f * uniform01(seed, 0, uint64_t(i)) - 1.0f) * scale);
  return out;
}

}  // namespace coserve::gpu::ref
