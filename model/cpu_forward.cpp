#include "model/cpu_forward.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace coserve {
namespace {

// y[rows, n] = x[rows, k] @ w[n, k]^T (+ y when accumulate).
// A few rows (decode) go through sgemv: sgemm would pack (copy) all of w on every call, which
// costs more than the product itself when rows is small.
void gemm_nt(const float* x, const float* w, float* y, int64_t rows, int64_t n, int64_t k, bool accumulate) {
  constexpr int64_t k_gemv_rows = 4;
  if (rows <= k_gemv_rows) {
    for (int64_t r = 0; r < rows; ++r)
      cblas_sgemv(CblasRowMajor, CblasNoTrans, blasint(n), blasint(k), 1.0f, w, blasint(k), x + r * k, 1,
                  accumulate ? 1.0f : 0.0f, y + r * n, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasint(rows), blasint(n), blasint(k), 1.0f, x,
              blasint(k), w, blasint(k), accumulate ? 1.0f : 0.0f, y, blasint(n));
}

}  // namespace

std::vector<float> rope_inv_freq(const model_config& c) {
  const int32_t half = c.head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int32_t i = 0; i < half; ++i) {
    const float exponent = float(2 * i) / float(c.head_dim);
    inv[size_t(i)] = float(1.0 / std::pow(double(c.rope_theta), double(exponent)));
  }
  if (c.rope_scaling.kind == rope_kind::llama3) {
    // Same rule as transformers' _compute_llama3_parameters.
    const auto& s = c.rope_scaling;
    const float old_len = float(s.original_max_position_embeddings);
    const float low_wavelen = old_len / s.low_freq_factor;
    const float high_wavelen = old_len / s.high_freq_factor;
    const float pi = 3.14159265358979323846f;
    for (float& f : inv) {
      const float wavelen = 2.0f * pi / f;
      float scaled = wavelen > low_wavelen ? f / s.factor : f;
      if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        const float smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        scaled = (1.0f - smooth) * scaled / s.factor + smooth * scaled;
      }
      f = scaled;
    }
  }
  return inv;
}

cpu_forward::cpu_forward(const model_weights& weights, worker_pool& pool)
    : w_(weights), c_(weights.config), pool_(pool), inv_freq_(rope_inv_freq(weights.config)) {}

void cpu_forward::rms_norm(const float* x, const float* w, float* out, int64_t rows) {
  const int64_t h = c_.hidden_size;
  const float eps = c_.rms_norm_eps;
  pool_.parallel_for(rows, [&](int64_t r) {
    const float* xr = x + r * h;
    float* o = out + r * h;
    float ss = 0.0f;
    for (int64_t i = 0; i < h; ++i) ss += xr[i] * xr[i];
    const float scale = 1.0f / std::sqrt(ss / float(h) + eps);
    for (int64_t i = 0; i < h; ++i) o[i] = w[i] * (xr[i] * scale);
  });
}

// Rotates q and k heads in place (the "rotate_half" layout: pairs (i, i + D/2)).
void cpu_forward::rope(float* qkv, const std::vector<int32_t>& positions) {
  const int32_t d = c_.head_dim, half = d / 2;
  const int32_t heads = c_.num_attention_heads + c_.num_key_value_heads;
  const int64_t row = int64_t(c_.num_attention_heads + 2 * c_.num_key_value_heads) * d;
  pool_.parallel_for(int64_t(positions.size()), [&](int64_t t) {
    std::vector<float> cs(static_cast<size_t>(d));
    const float pos = float(positions[size_t(t)]);
    for (int32_t i = 0; i < half; ++i) {
      const float angle = inv_freq_[size_t(i)] * pos;
      cs[size_t(i)] = float(std::cos(double(angle)));
      cs[size_t(half + i)] = float(std::sin(double(angle)));
    }
    float* r = qkv + t * row;
    for (int32_t hd = 0; hd < heads; ++hd) {
      float* v = r + int64_t(hd) * d;
      for (int32_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        const float cos = cs[size_t(i)], sin = cs[size_t(half + i)];
        v[i] = a * cos - b * sin;
        v[i + half] = b * cos + a * sin;
      }
    }
  });
}

// One work item per (sequence, query head): scores over the sequence's cached positions.
void cpu_forward::attention(int32_t layer, const std::vector<forward_seq>& batch, const kv_cache& cache) {
  const int32_t d = c_.head_dim, nh = c_.num_attention_heads, nkv = c_.num_key_value_heads;
  const int32_t group = nh / nkv;
  const int64_t row = int64_t(nh + 2 * nkv) * d;
  const float scale = 1.0f / std::sqrt(float(d));
  pool_.parallel_for(int64_t(batch.size()) * nh, [&](int64_t item) {
    const size_t s = size_t(item / nh);
    const int32_t head = int32_t(item % nh), kvh = head / group;
    const forward_seq& fs = batch[s];
    const int64_t first = seq_offsets_[s];
    const int32_t ctx = fs.start_pos + fs.num_tokens;
    std::vector<float> scores(static_cast<size_t>(ctx));
    std::vector<int64_t> slots(static_cast<size_t>(ctx));
    for (int32_t p = 0; p < ctx; ++p) slots[size_t(p)] = cache.slot(*fs.block_table, p);
    for (int32_t i = 0; i < fs.num_tokens; ++i) {
      const int64_t t = first + i;
      const float* q = qkv_.data() + t * row + int64_t(head) * d;
      const int32_t len = fs.start_pos + i + 1;  // causal: positions [0, pos]
      float mx = -INFINITY;
      for (int32_t p = 0; p < len; ++p) {
        const float* k = cache.k(layer, slots[size_t(p)]) + int64_t(kvh) * d;
        float dot = 0.0f;
        for (int32_t j = 0; j < d; ++j) dot += q[j] * k[j];
        scores[size_t(p)] = dot * scale;
        mx = std::max(mx, scores[size_t(p)]);
      }
      float sum = 0.0f;
      for (int32_t p = 0; p < len; ++p) {
        scores[size_t(p)] = std::exp(scores[size_t(p)] - mx);
        sum += scores[size_t(p)];
      }
      float* out = attn_.data() + t * int64_t(nh) * d + int64_t(head) * d;
      std::fill(out, out + d, 0.0f);
      for (int32_t p = 0; p < len; ++p) {
        const float* v = cache.v(layer, slots[size_t(p)]) + int64_t(kvh) * d;
        const float wgt = scores[size_t(p)] / sum;
        for (int32_t j = 0; j < d; ++j) out[j] += wgt * v[j];
      }
    }
  });
}

result<void> cpu_forward::run(const std::vector<forward_seq>& batch, kv_cache& cache, bool all_rows,
                              std::vector<float>& logits) {
  const int64_t h = c_.hidden_size, d = c_.head_dim, nh = c_.num_attention_heads, nkv = c_.num_key_value_heads;
  const int64_t inter = c_.intermediate_size, vocab = c_.vocab_size;
  const int64_t qkv_n = (nh + 2 * nkv) * d;

  // Validate and lay out the batch: token t of the flattened batch has positions_[t], slots_[t].
  int64_t total = 0;
  seq_offsets_.assign(batch.size(), 0);
  positions_.clear();
  slots_.clear();
  for (size_t s = 0; s < batch.size(); ++s) {
    const forward_seq& fs = batch[s];
    seq_offsets_[s] = total;
    if (fs.num_tokens <= 0 || fs.start_pos < 0 || !fs.block_table)
      return make_error("invalid_argument", "forward: sequence " + std::to_string(s) + " has no tokens or block table");
    if (fs.start_pos + fs.num_tokens > c_.max_position_embeddings)
      return make_error("invalid_argument", "forward: position " + std::to_string(fs.start_pos + fs.num_tokens - 1) +
                                                " beyond the model's context of " + std::to_string(c_.max_position_embeddings));
    for (int32_t p = 0; p < fs.start_pos + fs.num_tokens; ++p)
      if (cache.slot(*fs.block_table, p) < 0)
        return make_error("invalid_argument", "forward: block table of sequence " + std::to_string(s) +
                                                  " does not cover position " + std::to_string(p));
    for (int32_t i = 0; i < fs.num_tokens; ++i) {
      if (fs.tokens[i] < 0 || fs.tokens[i] >= vocab)
        return make_error("invalid_argument", "forward: token id " + std::to_string(fs.tokens[i]) + " outside the vocabulary");
      positions_.push_back(fs.start_pos + i);
      slots_.push_back(cache.slot(*fs.block_table, fs.start_pos + i));
    }
    total += fs.num_tokens;
  }
  if (total == 0) {
    logits.clear();
    return {};
  }

  x_.resize(size_t(total * h));
  xn_.resize(size_t(total * h));
  qkv_.resize(size_t(total * qkv_n));
  attn_.resize(size_t(total * nh * d));
  gu_.resize(size_t(total * 2 * inter));
  act_.resize(size_t(total * inter));
  {
    int64_t t = 0;
    for (const auto& fs : batch)
      for (int32_t i = 0; i < fs.num_tokens; ++i, ++t)
        std::copy_n(w_.embed.data() + int64_t(fs.tokens[i]) * h, h, x_.data() + t * h);
  }

  for (int32_t l = 0; l < c_.num_hidden_layers; ++l) {
    const layer_weights& L = w_.layers[size_t(l)];
    rms_norm(x_.data(), L.input_norm.data(), xn_.data(), total);
    gemm_nt(xn_.data(), L.qkv.data(), qkv_.data(), total, qkv_n, h, false);
    if (!L.qkv_bias.empty())
      pool_.parallel_for(total, [&](int64_t t) {
        float* r = qkv_.data() + t * qkv_n;
        for (int64_t j = 0; j < qkv_n; ++j) r[j] += L.qkv_bias[size_t(j)];
      });
    rope(qkv_.data(), positions_);
    for (int64_t t = 0; t < total; ++t) {
      const float* r = qkv_.data() + t * qkv_n;
      std::copy_n(r + nh * d, nkv * d, cache.k(l, slots_[size_t(t)]));
      std::copy_n(r + (nh + nkv) * d, nkv * d, cache.v(l, slots_[size_t(t)]));
    }
    attention(l, batch, cache);
    gemm_nt(attn_.data(), L.o.data(), x_.data(), total, h, nh * d, true);
    if (!L.o_bias.empty())
      for (int64_t t = 0; t < total; ++t)
        for (int64_t j = 0; j < h; ++j) x_[size_t(t * h + j)] += L.o_bias[size_t(j)];

    rms_norm(x_.data(), L.post_norm.data(), xn_.data(), total);
    gemm_nt(xn_.data(), L.gate_up.data(), gu_.data(), total, 2 * inter, h, false);
    pool_.parallel_for(total, [&](int64_t t) {
      const float* g = gu_.data() + t * 2 * inter;
      const float* u = g + inter;
      float* a = act_.data() + t * inter;
      for (int64_t j = 0; j < inter; ++j) a[j] = g[j] / (1.0f + std::exp(-g[j])) * u[j];
    });
    gemm_nt(act_.data(), L.down.data(), x_.data(), total, h, inter, true);
  }

  // Final norm and LM head over the rows asked for.
  std::vector<int64_t> rows;
  if (all_rows) {
    for (int64_t t = 0; t < total; ++t) rows.push_back(t);
  } else {
    for (size_t s = 0; s < batch.size(); ++s)
      if (batch[s].want_logits) rows.push_back(seq_offsets_[s] + batch[s].num_tokens - 1);
  }
  logits.resize(size_t(int64_t(rows.size()) * vocab));
  if (rows.empty()) return {};
  std::vector<float> picked(rows.size() * size_t(h));
  for (size_t r = 0; r < rows.size(); ++r) std::copy_n(x_.data() + rows[r] * h, h, picked.data() + r * size_t(h));
  std::vector<float> normed(picked.size());
  rms_norm(picked.data(), w_.final_norm.data(), normed.data(), int64_t(rows.size()));
  gemm_nt(normed.data(), w_.lm_head_data(), logits.data(), int64_t(rows.size()), vocab, h, false);
  return {};
}

}  // namespace coserve
