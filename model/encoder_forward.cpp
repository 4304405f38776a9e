#include "model/encoder_forward.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "model/dtype.hpp"

namespace coserve {

namespace {

constexpr int64_t k_row_block = 64;  // rows of x per projection piece

// Softmax of one row in place.
void softmax_row(float* s, int64_t n) {
  float m = s[0];
  for (int64_t j = 1; j < n; ++j) m = std::max(m, s[j]);
  float sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - m);
    sum += s[j];
  }
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < n; ++j) s[j] *= inv;
}

}  // namespace

encoder_forward::encoder_forward(const encoder_weights& weights, worker_pool& pool)
    : w_(weights), pool_(pool) {}

void encoder_forward::linear(const float* x, int64_t rows, const weight_ref& w, const float* bias,
                             float* y, int64_t ldy) {
  const int64_t n = w.rows, k = w.cols;
  if (ldy == 0) ldy = n;
  const int64_t threads = pool_.num_threads();
  const int64_t row_blocks = (rows + k_row_block - 1) / k_row_block;
  // Enough column pieces that every thread has several, each a multiple of 16 rows of w.
  int64_t col_pieces = std::max<int64_t>(1, (threads * 4 + row_blocks - 1) / row_blocks);
  int64_t cols_per = ((n + col_pieces - 1) / col_pieces + 15) / 16 * 16;
  col_pieces = (n + cols_per - 1) / cols_per;
  pool_.parallel_for(row_blocks * col_pieces, [&](int64_t i) {
    const int64_t rb = i / col_pieces, cp = i % col_pieces;
    const int64_t r0 = rb * k_row_block, m = std::min(k_row_block, rows - r0);
    const int64_t c0 = cp * cols_per, nc = std::min(cols_per, n - c0);
    weight_ref part = w;
    part.data = w.row(c0);
    part.rows = nc;
    float* out = y + r0 * ldy + c0;
    matmul_nt(x + r0 * k, k, m, part, nc, out, ldy, false);
    if (bias != nullptr)
      for (int64_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < nc; ++c) out[r * ldy + c] += bias[c0 + c];
  });
}

void encoder_forward::add_layer_norm(float* x, const float* add, const float* w, const float* b,
                                     int64_t rows) {
  const int64_t h = w_.config.hidden_size;
  const float eps = w_.config.layer_norm_eps;
  pool_.parallel_for(rows, [&](int64_t r) {
    float* row = x + r * h;
    if (add != nullptr)
      for (int64_t j = 0; j < h; ++j) row[j] += add[r * h + j];
    double mean = 0;
    for (int64_t j = 0; j < h; ++j) mean += row[j];
    mean /= double(h);
    double var = 0;
    for (int64_t j = 0; j < h; ++j) var += (row[j] - mean) * (row[j] - mean);
    var /= double(h);
    const float inv = float(1.0 / std::sqrt(var + double(eps)));
    const float mu = float(mean);
    for (int64_t j = 0; j < h; ++j) row[j] = (row[j] - mu) * inv * w[j] + b[j];
  });
}

void encoder_forward::activate(float* x, int64_t n) {
  const encoder_activation act = w_.config.hidden_act;
  constexpr int64_t chunk = 4096;
  pool_.parallel_for((n + chunk - 1) / chunk, [&](int64_t c) {
    float* p = x + c * chunk;
    const int64_t m = std::min(chunk, n - c * chunk);
    switch (act) {
      case encoder_activation::gelu:
      case encoder_activation::gelu_tanh:
        gelu(p, size_t(m), act == encoder_activation::gelu_tanh);
        break;
      case encoder_activation::relu:
        for (int64_t i = 0; i < m; ++i) p[i] = std::max(p[i], 0.0f);
        break;
      case encoder_activation::silu:
        for (int64_t i = 0; i < m; ++i) p[i] = p[i] / (1.0f + std::exp(-p[i]));
        break;
    }
  });
}

// ctx[t, h*D:(h+1)*D] = softmax(q_h k_h^T / sqrt(D)) v_h over the sequence's own rows, per
// (sequence, head); q, k and v are the thirds of each qkv row.
void encoder_forward::attention(const float* qkv, float* ctx) {
  const int64_t hidden = w_.config.hidden_size, heads = w_.config.num_attention_heads;
  const int64_t d = w_.config.head_dim();
  const int64_t seqs = int64_t(starts_.size()) - 1;
  const float scale = 1.0f / std::sqrt(float(d));
  pool_.parallel_for(seqs * heads, [&](int64_t item) {
    const int64_t s = item / heads, h = item % heads;
    const int64_t r0 = starts_[size_t(s)], n = starts_[size_t(s) + 1] - r0;
    thread_local std::vector<float> q, k, vt, scores;
    q.resize(size_t(n * d));
    k.resize(size_t(n * d));
    vt.resize(size_t(d * n));
    scores.resize(size_t(n * n));
    for (int64_t t = 0; t < n; ++t) {
      const float* row = qkv + (r0 + t) * 3 * hidden + h * d;
      for (int64_t j = 0; j < d; ++j) {
        q[size_t(t * d + j)] = row[j] * scale;
        k[size_t(t * d + j)] = row[hidden + j];
        vt[size_t(j * n + t)] = row[2 * hidden + j];
      }
    }
    matmul_nt(q.data(), d, n, weight_ref{dtype::f32, k.data(), n, d}, n, scores.data(), n, false);
    for (int64_t t = 0; t < n; ++t) softmax_row(scores.data() + t * n, n);
    matmul_nt(scores.data(), n, n, weight_ref{dtype::f32, vt.data(), d, n}, d,
              ctx + r0 * hidden + h * d, hidden, false);
  });
}

result<void> encoder_forward::run(const std::vector<encoder_input>& batch) {
  const encoder_config& c = w_.config;
  const int64_t h = c.hidden_size;
  starts_.assign(1, 0);
  for (const encoder_input& in : batch) {
    if (in.num_tokens <= 0) return make_error("invalid_request", "an empty sequence");
    if (in.num_tokens > c.max_model_len())
      return make_error("invalid_request", "a sequence of " + std::to_string(in.num_tokens) +
                                               " tokens is longer than the model's " +
                                               std::to_string(c.max_model_len()));
    for (int32_t t = 0; t < in.num_tokens; ++t) {
      if (in.tokens[t] < 0 || in.tokens[t] >= c.vocab_size)
        return make_error("invalid_request", "token id " + std::to_string(in.tokens[t]) +
                                                 " is outside the vocabulary");
      if (in.token_types != nullptr && in.token_types[t] >= std::max(c.type_vocab_size, 1))
        return make_error("invalid_request", "token type " + std::to_string(in.token_types[t]) +
                                                 " is outside type_vocab_size");
    }
    starts_.push_back(starts_.back() + in.num_tokens);
  }
  const int64_t total = starts_.back();
  x_.resize(size_t(total * h));
  tmp_.resize(size_t(total * h));
  qkv_.resize(size_t(total * 3 * h));
  ctx_.resize(size_t(total * h));
  inter_.resize(size_t(total * c.intermediate_size));

  // Embeddings: word + position + token type, then LayerNorm.
  pool_.parallel_for(int64_t(batch.size()), [&](int64_t s) {
    const encoder_input& in = batch[size_t(s)];
    std::vector<float> row(static_cast<size_t>(h));
    int32_t counted = 0;  // RoBERTa-style positions: tokens other than the pad id so far
    for (int32_t t = 0; t < in.num_tokens; ++t) {
      float* out = x_.data() + (starts_[size_t(s)] + t) * h;
      convert_to_f32(w_.word_embeddings.type, w_.word_embeddings.row(in.tokens[t]), out, size_t(h));
      // BERT: 0, 1, 2, ...; RoBERTa / XLM-R (transformers' create_position_ids_from_input_ids):
      // pad_token_id + the count of non-pad tokens up to this one, and pad_token_id for a pad.
      int32_t pos = t;
      if (c.position_offset > 0)
        pos = in.tokens[t] == c.pad_token_id ? c.pad_token_id : c.pad_token_id + ++counted;
      convert_to_f32(w_.position_embeddings.type, w_.position_embeddings.row(pos), row.data(),
                     size_t(h));
      for (int64_t j = 0; j < h; ++j) out[j] += row[size_t(j)];
      if (w_.token_type_embeddings.rows > 0) {
        const int32_t type = in.token_types != nullptr ? in.token_types[t] : 0;
        convert_to_f32(w_.token_type_embeddings.type, w_.token_type_embeddings.row(type),
                       row.data(), size_t(h));
        for (int64_t j = 0; j < h; ++j) out[j] += row[size_t(j)];
      }
    }
  });
  add_layer_norm(x_.data(), nullptr, w_.embed_norm_w.data(), w_.embed_norm_b.data(), total);

  for (const encoder_layer& L : w_.layers) {
    // q, k, v side by side in each qkv row: three products into column ranges of one buffer.
    const weight_ref* parts[] = {&L.q, &L.k, &L.v};
    for (int p = 0; p < 3; ++p)
      linear(x_.data(), total, *parts[p], L.qkv_bias.data() + p * h, qkv_.data() + p * h, 3 * h);
    attention(qkv_.data(), ctx_.data());
    linear(ctx_.data(), total, L.o, L.o_bias.data(), tmp_.data());
    add_layer_norm(x_.data(), tmp_.data(), L.attn_norm_w.data(), L.attn_norm_b.data(), total);
    linear(x_.data(), total, L.up, L.up_bias.data(), inter_.data());
    activate(inter_.data(), total * c.intermediate_size);
    linear(inter_.data(), total, L.down, L.down_bias.data(), tmp_.data());
    add_layer_norm(x_.data(), tmp_.data(), L.out_norm_w.data(), L.out_norm_b.data(), total);
  }
  return {};
}

std::vector<float> encoder_forward::pool(size_t i, pooling_type type) const {
  const int64_t h = w_.config.hidden_size;
  const int64_t r0 = starts_[i], n = starts_[i + 1] - r0;
  std::vector<float> out(static_cast<size_t>(h), 0.0f);
  switch (type) {
    case pooling_type::cls:
      std::copy_n(x_.data() + r0 * h, h, out.data());
      break;
    case pooling_type::last:
      std::copy_n(x_.data() + (r0 + n - 1) * h, h, out.data());
      break;
    case pooling_type::mean: {
      std::vector<double> sum(static_cast<size_t>(h), 0.0);
      for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < h; ++j) sum[size_t(j)] += x_[size_t((r0 + t) * h + j)];
      for (int64_t j = 0; j < h; ++j) out[size_t(j)] = float(sum[size_t(j)] / double(n));
      break;
    }
  }
  return out;
}

std::vector<float> encoder_forward::classify(size_t i) {
  const int64_t h = w_.config.hidden_size;
  const float* first = x_.data() + int64_t(starts_[i]) * h;
  std::vector<float> dense(static_cast<size_t>(h));
  matmul_nt(first, h, 1, w_.head_dense, h, dense.data(), h, false);
  for (int64_t j = 0; j < h; ++j)
    dense[size_t(j)] = std::tanh(dense[size_t(j)] + w_.head_dense_bias[size_t(j)]);
  const int64_t labels = w_.config.num_labels;
  std::vector<float> out(static_cast<size_t>(labels));
  matmul_nt(dense.data(), h, 1, w_.head_out, labels, out.data(), labels, false);
  for (int64_t j = 0; j < labels; ++j) out[size_t(j)] += w_.head_out_bias[size_t(j)];
  return out;
}

}  // namespace coserve
