// fp32 forward pass on the CPU over the paged KV cache, for a batch that mixes prefill chunks and
// decode tokens of different sequences (variable lengths in one call).
//
// Per layer: RMSNorm -> fused QKV GEMM (+bias) -> RoPE (default or llama3) -> K/V written to their
// slots -> causal GQA attention over each sequence's cached positions [0, pos] -> O GEMM ->
// residual -> RMSNorm -> fused gate/up GEMM -> SiLU(gate) * up -> down GEMM -> residual.
// GEMMs go through OpenBLAS (its own threads); attention and elementwise work through the pool.
#pragma once

#include <cstdint>
#include <vector>

#include "model/kv_cache.hpp"
#include "model/weights.hpp"
#include "model/worker_pool.hpp"
#include "runtime/expected.hpp"

namespace coserve {

// One sequence's slice of the batch, with every input token already known.
struct forward_seq {
  const int32_t* tokens = nullptr;  // n tokens at positions [start_pos, start_pos + n)
  int32_t num_tokens = 0;
  int32_t start_pos = 0;
  const std::vector<int32_t>* block_table = nullptr;  // covers [0, start_pos + n)
  bool want_logits = false;         // logits of the last token
};

class cpu_forward {
 public:
  // `weights` must outlive this object. `pool` runs attention and elementwise work.
  cpu_forward(const model_weights& weights, worker_pool& pool);

  // Runs the batch; fills `logits` with one row of vocab_size floats per sequence with
  // want_logits (in batch order), or one row per token when all_rows is true.
  // Errors: a token id outside the vocabulary, a position past the block table or the model's
  // context, a block id outside the cache.
  result<void> run(const std::vector<forward_seq>& batch, kv_cache& cache, bool all_rows,
                   std::vector<float>& logits);

 private:
  void rms_norm(const float* x, const float* w, float* out, int64_t rows);
  void rope(float* qkv, const std::vector<int32_t>& positions);
  void attention(int32_t layer, const std::vector<forward_seq>& batch, const kv_cache& cache);

  const model_weights& w_;
  const model_config& c_;
  worker_pool& pool_;
  std::vector<float> inv_freq_;  // [head_dim / 2]
  // Scratch, reused across calls (grown, never shrunk).
  std::vector<float> x_, xn_, qkv_, attn_, gu_, act_;
  std::vector<int32_t> positions_;
  std::vector<int64_t> slots_;
  std::vector<int64_t> seq_offsets_;
};

// RoPE inverse frequencies of a config: theta^(-2i/d), with llama3 scaling when configured.
std::vector<float> rope_inv_freq(const model_config& c);

}  // namespace coserve
