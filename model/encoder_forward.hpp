// The encoder's forward pass on the CPU (model/encoder_model.hpp): a batch of whole sequences,
// packed one after another (no padding), each attending to all of its own tokens and none of the
// others'. No KV cache: an encoder sees every token of a sequence in one pass, so nothing is kept
// between passes. Weights in their file precision (f32, bf16, f16), activations and accumulation
// in fp32.
//
// Parallel on the worker_pool: the projections split over (row block, output columns), attention
// over (sequence, head), the norms and activations over rows.
#pragma once

#include <cstdint>
#include <vector>

#include "base/result.hpp"
#include "model/encoder_model.hpp"
#include "model/worker_pool.hpp"

namespace coserve {

// One sequence of the batch: its token ids and their token types (null: all 0).
struct encoder_input {
  const int32_t* tokens = nullptr;
  int32_t num_tokens = 0;
  const uint8_t* token_types = nullptr;
};

class encoder_forward {
 public:
  // `weights` and `pool` must outlive this object.
  encoder_forward(const encoder_weights& weights, worker_pool& pool);

  // Runs the batch; the last layer's hidden states are then available per sequence. Errors: a
  // token id outside the vocabulary, a token type outside type_vocab_size, a sequence longer than
  // the position table or empty.
  result<void> run(const std::vector<encoder_input>& batch);

  // After run(): sequence i's pooled vector (hidden_size floats).
  std::vector<float> pool(size_t i, pooling_type type) const;
  // After run(), for a cross-encoder: sequence i's classifier outputs (num_labels raw logits).
  std::vector<float> classify(size_t i);

 private:
  // y[r * ldy + (0:w.rows)] = x[r] . w^T + bias (bias may be null) for rows [0, rows), on the
  // pool; ldy 0: w.rows.
  void linear(const float* x, int64_t rows, const weight_ref& w, const float* bias, float* y,
              int64_t ldy = 0);
  // x = LayerNorm(x + add) per row (add may be null), in place.
  void add_layer_norm(float* x, const float* add, const float* w, const float* b, int64_t rows);
  void attention(const float* qkv, float* ctx);
  void activate(float* x, int64_t n);

  const encoder_weights& w_;
  worker_pool& pool_;
  std::vector<int32_t> starts_;  // first row of each sequence, plus the total at the end
  std::vector<float> x_, qkv_, ctx_, tmp_, inter_;
};

}  // namespace coserve
