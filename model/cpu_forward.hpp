// The forward pass on the CPU over the paged KV cache, for a batch that mixes prefill chunks and
// decode tokens of different sequences (variable lengths in one call). Weights in their file
// precision, activations and accumulation in fp32, the KV cache in its own dtype.
//
// Per layer: RMSNorm -> Q/K/V GEMM (+bias) -> RoPE (default or llama3) -> K/V written to their
// slots -> causal GQA attention over each sequence's cached positions [0, pos] -> O GEMM ->
// residual -> RMSNorm -> gate/up GEMM -> SiLU(gate) * up -> down GEMM -> residual. A
// mixture-of-experts layer replaces the MLP: router GEMM -> softmax -> top-k experts per token ->
// per expert, the SwiGLU MLP over the rows routed to it, each output row scaled by its routing
// weight and summed -> residual.
// Everything runs on the one worker_pool: GEMMs split over output features (the kernels of
// cpu_kernels.hpp), attention over (sequence, KV head, query tile or context split).
// Tensor parallel (weights.shard of size > 1, with a communicator): the pass runs the rank's
// heads and MLP columns; the O and down products are partial sums, all-reduced before the
// residual; the LM head computes the rank's vocabulary rows, gathered on rank 0, the only rank
// whose `logits` are filled.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include "base/result.hpp"
#include "model/communicator.hpp"
#include "model/executor.hpp"
#include "model/kv_cache.hpp"
#include "model/lora.hpp"
#include "model/rope.hpp"
#include "model/weights.hpp"
#include "model/worker_pool.hpp"

namespace coserve {

// One sequence's slice of the batch, with every input token already known.
struct forward_seq {
  const int32_t* tokens = nullptr;  // n tokens at positions [start_pos, start_pos + n)
  int32_t num_tokens = 0;
  int32_t start_pos = 0;
  const std::vector<int32_t>* block_table = nullptr;  // covers [0, start_pos + n)
  bool want_logits = false;                           // logits of the last token
  int32_t logit_rows = 1;  // with want_logits: of the last logit_rows tokens (in order)
  // A LoRA adapter over the base model for this sequence (none: the base model); it must outlive
  // the run. Each projection it targets adds scaling * B (A x) to the base product.
  const lora_adapter* lora = nullptr;
};

// Seconds spent per phase since the last reset (wall time of the calling thread).
struct forward_profile {
  double gemm_s = 0;       // projections and the LM head
  double attention_s = 0;  // attention (with the KV writes and split merges)
  double other_s = 0;      // embedding, norms, RoPE, activation, residuals
  double comm_s = 0;       // tensor parallel: all-reduces and the logits gather (waits included)
  int64_t steps = 0;
  double expert_bytes =
      0;  // mixture of experts: bytes of the expert matrices the steps read (this rank's)
};

class cpu_forward {
 public:
  // `weights` must outlive this object. `pool` runs every parallel part of the pass.
  cpu_forward(const model_weights& weights, worker_pool& pool);

  // Runs the batch; fills `logits` with logit_rows rows of vocab_size floats per sequence with
  // want_logits (in batch order), or one row per token when all_rows is true.
  // Errors: a token id outside the vocabulary, a position past the block table or the model's
  // context, a block id outside the cache.
  result<void> run(const std::vector<forward_seq>& batch, kv_cache& cache, bool all_rows,
                   std::vector<float>& logits);

  // Matrix products with bf16 weights round their activations to bf16 (matmul_nt's act_bf16;
  // --dtype auto/bfloat16). Off: fp32 activations (--dtype float32).
  void set_bf16_activations(bool on) noexcept { bf16_act_ = on; }
  // The group a tensor-parallel shard's collectives run on (must outlive this object); needed when
  // weights.shard.size > 1. Its rank and size must be the shard's.
  void set_communicator(communicator* comm) noexcept { comm_ = comm; }
  bool bf16_activations() const noexcept { return bf16_act_; }

  // After run(): the last token of batch[s] as the LM head sees it (the final norm applied), the
  // vector of last-token pooling.
  std::vector<float> last_hidden(size_t s, const std::vector<forward_seq>& batch) const;

  const forward_profile& profile() const noexcept { return profile_; }
  // Tensor parallel, on rank 0: every rank's figures as of the latest logits gather (rank order).
  const std::vector<rank_stats>& tp_rank_stats() const noexcept { return rank_stats_; }
  void reset_profile() noexcept { profile_ = {}; }

 private:
  struct gemm_part {
    const weight_ref* w;
    int64_t col;          // first output column in y
    int64_t x_row0 = 0;   // grouped products (the experts'): this part multiplies rows
    int64_t x_rows = -1;  // [x_row0, x_row0 + x_rows) of x into the same rows of y; -1: every row
  };
  struct gemm_piece {
    const gemm_part* part;
    int64_t row0, n;
  };
  struct attn_item {
    int32_t seq, kv_head, q_first, num_q, ctx_begin, ctx_end;
    int32_t splits;   // 1: writes the output; > 1: one of `splits` partials of a group
    int64_t partial;  // index of this item's partial (split groups only)
  };

  void matmul(const float* x, int64_t rows, std::initializer_list<gemm_part> parts, float* y,
              int64_t ldy, bool accumulate) {
    matmul(x, rows, parts.begin(), parts.size(), y, ldy, accumulate);
  }
  void matmul(const float* x, int64_t rows, const gemm_part* parts, size_t num_parts, float* y,
              int64_t ldy, bool accumulate);
  void rms_norm(const float* x, const float* w, float* out, int64_t rows);
  void head_norm(float* qkv, int64_t rows, const layer_weights& L);
  void rope(float* qkv, const std::vector<int32_t>& positions);
  void plan_attention(const std::vector<forward_seq>& batch);
  void attention(int32_t layer, const std::vector<forward_seq>& batch, const kv_cache& cache);
  // x_ += in [rows, w.cols] x w^T: directly, or (tensor parallel) as the sum over ranks of each
  // rank's partial product, all-reduced. Adds the time to the profile from `tp` on.
  result<void> residual_matmul(const float* in, int64_t rows, const weight_ref& w,
                               std::chrono::steady_clock::time_point& tp);
  result<void> gather_logits(std::vector<float>& local, int64_t rows, std::vector<float>& logits);
  // x_ += y ([rows, hidden]); tensor parallel: y (a rank's partial sum) all-reduced first.
  result<void> add_to_residual(float* y, int64_t rows, std::chrono::steady_clock::time_point& tp);
  // SwiGLU: act[r] = SiLU(gu[r][0, I)) * gu[r][I, 2I) for rows r.
  void swiglu(const float* gu, int64_t rows, int64_t inter, float* act);
  // The steps of run(): batch layout and checks, embeddings, each layer's attention half and MLP
  // (dense or mixture of experts), and the LM head. Those taking `tp` add their phases' time to
  // the profile from `tp` on.
  result<int64_t> lay_out_batch(const std::vector<forward_seq>& batch, const kv_cache& cache);
  void embed_tokens(const std::vector<forward_seq>& batch, int64_t total);
  result<void> attention_block(int32_t layer, const layer_weights& L,
                               const std::vector<forward_seq>& batch, kv_cache& cache,
                               int64_t total, std::chrono::steady_clock::time_point& tp);
  result<void> dense_mlp(int32_t layer, const layer_weights& L, int64_t total,
                         std::chrono::steady_clock::time_point& tp);
  // y[r, col, col + out) += scaling * B (A x[r]) for each row r whose sequence's adapter targets
  // (layer, t): x rows of ldx floats, y rows of ldy. Nothing without adapters in the batch.
  void add_lora(int32_t layer, lora_target t, const float* x, int64_t ldx, float* y, int64_t ldy,
                int64_t col, int64_t total);
  std::vector<int64_t> logit_rows(const std::vector<forward_seq>& batch, int64_t total,
                                  bool all_rows) const;
  result<void> lm_head(const std::vector<forward_seq>& batch, int64_t total, bool all_rows,
                       std::vector<float>& logits, std::chrono::steady_clock::time_point& tp);
  // A mixture-of-experts layer's MLP over xn_ (total rows), added to the residual stream; its
  // steps: routing, grouping the routed rows by expert, the experts' grouped products, the shared
  // expert, and the weighted sum per token.
  result<void> moe_mlp(const layer_weights& L, int64_t total,
                       std::chrono::steady_clock::time_point& tp);
  void route_tokens(const layer_weights& L, int64_t total,
                    std::chrono::steady_clock::time_point& tp);
  void group_routes(int64_t total);
  size_t expert_parts(const layer_weights& L, bool down);
  void run_experts(const layer_weights& L, int64_t routed,
                   std::chrono::steady_clock::time_point& tp);
  void shared_expert(const layer_weights& L, int64_t total, int64_t routed,
                     std::chrono::steady_clock::time_point& tp);
  void combine_experts(int64_t total, bool shared);

  const model_weights& w_;
  const model_config& c_;
  worker_pool& pool_;
  bool bf16_act_ = false;
  communicator* comm_ = nullptr;
  int32_t nh_, nkv_, inter_;          // this rank's query heads, KV heads, MLP width
  int32_t moe_inter_;                 // its width of each expert's MLP (0: no experts)
  int32_t shared_inter_;              // and of the shared expert's (0: none)
  int32_t vocab0_, vocab1_;           // this rank's LM-head rows
  bool tp_;                           // weights.shard.size > 1
  std::vector<float> inv_freq_;       // [rotary_dim / 2]
  std::vector<float> inv_freq_long_;  // longrope: from original_max_position_embeddings on
  // Scratch, reused across calls (grown, never shrunk).
  std::vector<float> x_, xn_, qkv_, attn_, gu_, act_, part_, local_logits_;
  std::vector<unsigned char> gathered_;  // tensor parallel: every rank's logits, on rank 0
  std::vector<rank_stats> rank_stats_;
  std::vector<uint16_t> xb_;    // a matmul's activations rounded to bf16 (AVX512-BF16 kernel)
  std::vector<float> xp_;       // the same for the widening kernel, in its tiles' layout
  std::vector<uint8_t> xq_[2];  // a matmul's activations quantized (Q8_0 blocks, Q8_K blocks)
  std::vector<gemm_piece> pieces_;
  std::vector<attn_item> items_;
  std::vector<int64_t> split_groups_;  // per split group: its first item
  std::vector<float> part_max_, part_sum_, part_acc_;
  // Mixture of experts: router logits [rows, experts]; per token its experts and weights
  // [rows, top-k]; the routed rows expert by expert (route_first_ [experts + 1] delimiting them:
  // each one's token and weight), and per token the positions of its routed rows in that order;
  // the routed rows' inputs and outputs; the grouped products' parts.
  std::vector<float> router_, topk_w_, route_w_, xe_, ye_, shared_gate_;
  std::vector<int32_t> topk_e_, route_rows_, token_routes_;
  std::vector<int64_t> route_first_, route_at_;
  std::vector<gemm_part> expert_parts_;
  forward_profile profile_;
  std::vector<int32_t> positions_;
  std::vector<int64_t> slots_;
  std::vector<int64_t> seq_offsets_;
  std::vector<const lora_adapter*> row_lora_;  // per row of the batch (empty: no adapter in it)
};

// Rank r's LM-head rows of a vocabulary split over `size` ranks: [b, e), contiguous, sizes
// differing by at most one.
std::pair<int32_t, int32_t> vocab_range(int32_t vocab, int32_t size, int32_t rank);

// RoPE inverse frequencies of a config (model/rope.cpp): theta^(-2i/d), with GGUF's per-frequency
// divisors, or llama3, linear or yarn scaling when configured (yarn's attention factor is applied
// to cos and sin by the forward pass).

}  // namespace coserve
