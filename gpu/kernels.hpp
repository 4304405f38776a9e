// Host-facing launchers of the kernel families in gpu/kernels/*.cuh (compiled once, in
// gpu/kernels.cu). Every launcher: takes the stream last, checks its assumptions and returns
// invalid_argument when they fail, checks the launch, and never synchronizes. Pointers are device
// pointers; all tensors are row-major and contiguous unless a stride is given.
// CPU references of each family: gpu/reference/*.hpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/result.hpp"
#include "gpu/batch_plan.hpp"
#include "gpu/logit_edit.hpp"
#include "gpu/sample_row_params.hpp"

namespace coserve::gpu {

using bf16 = __nv_bfloat16;

// ---- embedding.cuh ------------------------------------------------------------------------------
// out[t, :] = table[id, :] with id = ids[t], or, where ids[t] < 0 and last_tokens is given,
// id = last_tokens[-ids[t] - 1] (a decode input the previous step sampled on the device: the
// per-sequence last-token buffer). table [vocab, hidden]; ids out of [0, vocab) give a zero row.
result<void> launch_embedding(bf16* out, const bf16* table, const int32_t* ids,
                              const int32_t* last_tokens, int32_t num_tokens, int32_t hidden,
                              int32_t vocab, cudaStream_t stream);
// last_tokens[slots[r]] = tokens[r] for r < n where slots[r] >= 0 (each step's sampled ids into
// that buffer; -1: a row that feeds no input).
result<void> launch_scatter_tokens(int32_t* last_tokens, const int32_t* slots,
                                   const int32_t* tokens, int32_t n, cudaStream_t stream);

// ---- rmsnorm.cuh --------------------------------------------------------------------------------
// For each output row i with source row r = rows ? rows[i] : i:
//   z = add_residual ? bf16(x[r] + residual[r]) : x[r];   residual[r] = z   (when residual != null)
//   out[i] = bf16(weight * z * rsqrt(mean(z^2) + eps))     (fp32 arithmetic)
// x, residual [*, hidden]; out [num_rows, hidden]; out may alias x only when rows == nullptr.
result<void> launch_rmsnorm(bf16* out, const bf16* x, bf16* residual, const bf16* weight,
                            const int32_t* rows, int32_t num_rows, int32_t hidden, float eps,
                            bool add_residual, cudaStream_t stream);

// Qwen3's q/k norm, in place on qkv [num_tokens, (num_q_heads + 2 * num_kv_heads) * head_dim]:
// every q head h becomes bf16(q_weight * q_h * rsqrt(mean(q_h^2) + eps)) and every k head the same
// with k_weight (weights [head_dim]; fp32 arithmetic); v untouched. head_dim <= 256.
result<void> launch_head_rmsnorm(bf16* qkv, const bf16* q_weight, const bf16* k_weight,
                                 int32_t num_tokens, int32_t num_q_heads, int32_t num_kv_heads,
                                 int32_t head_dim, float eps, cudaStream_t stream);

// ---- quantize_fp8.cuh ---------------------------------------------------------------------------
// Per row r of x [rows, cols] (bf16): scales[r] = max(max_j |x[r, j]| / 448, k_fp8_min_scale) and
// codes[r, j] = E4M3(x[r, j] / scales[r]), rounded to nearest even, saturated at +-448 (the codes
// times the scale give back x to E4M3's precision). Weights per output channel at load,
// activations per token before each fp8 GEMM.
inline constexpr float k_fp8_min_scale =
    1.0f / (448.0f * 512.0f);  // vLLM's floor: an all-zero row stays finite
result<void> launch_quantize_rows_e4m3(uint8_t* codes, float* scales, const bf16* x, int64_t rows,
                                       int32_t cols, cudaStream_t stream);
// ---- gemv.cuh -----------------------------------------------------------------------------------
// Few rows (decodes at small batches): y [m, n] (bf16) = x [m, k] (bf16) . w [n, k]^T, times
// w_scales[n] for E4M3 weights, + bias[n] (bias may be null); fp32 accumulation, the activations
// as they are (fp8: W8A16, no activation quantization). m in 1..k_gemv_max_rows; k a multiple of
// 16 (fp8) or 8 (bf16); x and w rows 16-byte aligned.
inline constexpr int32_t k_gemv_max_rows = 8;
result<void> launch_fp8_gemv(bf16* y, const bf16* x, const uint8_t* w, const float* w_scales,
                             const bf16* bias, int32_t m, int32_t n, int32_t k,
                             cudaStream_t stream);
result<void> launch_bf16_gemv(bf16* y, const bf16* x, const bf16* w, const bf16* bias, int32_t m,
                              int32_t n, int32_t k, cudaStream_t stream);

// ---- KV cache elements --------------------------------------------------------------------------
// What the paged K/V caches hold (--kv-cache-dtype): bf16, or one byte per value in E4M3 or E5M2,
// stored unscaled (vLLM's default k/v scale of 1.0), rounded to nearest even and saturated at the
// format's largest finite value. Attention widens the bytes back to bf16 exactly.
enum class kv_elem : uint8_t { bf16, fp8_e4m3, fp8_e5m2 };
inline constexpr int32_t kv_elem_bytes(kv_elem t) { return t == kv_elem::bf16 ? 2 : 1; }

// ---- rope_kv.cuh --------------------------------------------------------------------------------
// qkv [num_tokens, (num_q_heads + 2 * num_kv_heads) * head_dim]: per token q heads, then k, then v.
// Rotates q and k in place (rotate-half / GPT-NeoX pairing (i, i + head_dim/2), angle =
// positions[t] * inv_freq[i]), then writes k and v to the paged cache at slot_mapping[t]:
//   k_cache, v_cache [num_blocks, block_size, num_kv_heads, head_dim] of kv_type; slot = block *
//   block_size + offset. fp8 caches take the rotated k as rounded to bf16 (what a bf16 cache
//   holds).
struct rope_kv_args {
  bf16* qkv;
  const int32_t* positions;
  const int32_t* slot_mapping;
  const float* inv_freq;  // [rotary_dim / 2]
  void* k_cache;
  void* v_cache;
  int32_t num_tokens, num_q_heads, num_kv_heads, head_dim;
  kv_elem kv_type = kv_elem::bf16;
  // LongRoPE: positions from long_from on use inv_freq_long instead (null: never).
  const float* inv_freq_long = nullptr;
  int32_t long_from = 0x7fffffff;
  float scale = 1.0f;  // cos and sin times this (YaRN's and LongRoPE's attention factor)
  int32_t rotary_dim =
      0;  // dimensions rotated per head, pairs (i, i + rotary_dim / 2); 0: head_dim
  int32_t rotate =
      1;  // 0: a layer without RoPE (SmolLM3's NoPE layers): k and v written as they are
};
result<void> launch_rope_kv_write(const rope_kv_args& a, cudaStream_t stream);

// ---- attention.cuh ------------------------------------------------------------------------------
// Causal attention of each new token over its sequence's paged keys (prefill chunks and decodes in
// one batch). Query t of sequence s sits at position kv_lens[s] - q_len(s) + t and sees keys
// [0, position], or with a sliding window W the keys (position - W, position]. Output out
// [num_tokens, num_q_heads * head_dim] bf16. Device arrays come from a batch_plan uploaded to the
// device (see gpu/batch_plan.hpp for their layouts).
struct attention_args {
  const bf16* q;  // [num_tokens, q_stride]; head h at q + t * q_stride + h * head_dim
  int64_t q_stride;
  const void* k_cache;  // [num_blocks, block_size, num_kv_heads, head_dim] of kv_type
  const void* v_cache;
  bf16* out;                    // [num_tokens, num_q_heads * head_dim]
  float* partial_o;             // [num_partial_rows, num_q_heads, head_dim] (split-KV workspace)
  float* partial_lse;           // [num_partial_rows, num_q_heads]
  const int32_t* cu_seqlens_q;  // [num_seqs + 1]
  const int32_t* kv_lens;       // [num_seqs]
  const int32_t* block_table_offsets;  // [num_seqs + 1]
  const int32_t* block_tables;         // concatenated
  const attn_work_item* work;          // [num_work]
  const attn_merge_item* merges;       // [num_merges]
  int32_t num_work, num_merges;        // grid sizes (with counts: capacities)
  int32_t num_q_heads, num_kv_heads, head_dim, block_size;
  float scale;  // usually 1 / sqrt(head_dim)
  // Fixed grid (CUDA graphs): {work items, merges} of this step in device memory; blocks past them
  // exit at once. nullptr: the grid is exactly num_work / num_merges.
  const int32_t* counts = nullptr;
  kv_elem kv_type = kv_elem::bf16;
  int32_t window =
      0;  // sliding window (transformers' mask: keys k with position - window < k); 0: none
};
result<void> launch_attention(const attention_args& a, cudaStream_t stream);

// ---- silu_mul.cuh -------------------------------------------------------------------------------
// out[t, j] = silu(gate_up[t, j]) * gate_up[t, inter + j]; gate_up [num_tokens, 2 * inter].
result<void> launch_silu_mul(bf16* out, const bf16* gate_up, int32_t num_tokens, int32_t inter,
                             cudaStream_t stream);

// ---- sampling.cuh -------------------------------------------------------------------------------
// Parameters per row: gpu/sample_row_params.hpp. temperature <= 0: greedy (lowest index among
// ties). Otherwise x = logits / temperature, keep the top_k largest (ties kept; <= 0 disables),
// then the smallest set of largest values whose mass is >= top_p of what is left (ties kept), then
// x >= max + log(min_p); draw by Gumbel-max with uniform01(seed, counter, token). logprob =
// log_softmax over the kept set (the CPU sampler's "log_softmax of the processed row"); greedy:
// over the whole row, no temperature. out_top (optional) [num_rows, k_top_logprob_words]: for a row
// with top_n > 0, its top min(top_n, 20) logprobs over the same processed row as (id, logprob as
// f32 bits) pairs, value descending, lower id first among equal values, without -inf entries; an id
// of -1 ends a shorter list.
inline constexpr int32_t k_top_logprobs_max = 20;
inline constexpr int32_t k_top_logprob_words = 2 * k_top_logprobs_max;
result<void> launch_sample(int32_t* out_tokens, float* out_logprobs, const float* logits,
                           const sample_row_params* params, int32_t num_rows, int32_t vocab,
                           cudaStream_t stream, uint32_t* out_top = nullptr);

// Prompt logprobs (vLLM's prompt_logprobs; the CPU's score_prompt_token) from raw logits [num_rows,
// vocab] fp32, row r scoring token targets[r] (in [0, vocab)). out [num_rows, stride] 32-bit words:
// [0] log_softmax at the target (f32 bits), [1] its rank (1 + the count of larger logits), then
// top_n pairs (id, log_softmax as f32 bits) by value descending, lower id first among equal ones;
// an id of -1 ends a row shorter than top_n. stride >= 2 + 2 * top_n.
inline constexpr int32_t k_prompt_logprobs_max_top = 20;
result<void> launch_prompt_logprobs(uint32_t* out, const float* logits, const int32_t* targets,
                                    int32_t num_rows, int32_t vocab, int32_t top_n, int32_t stride,
                                    cudaStream_t stream);

// ---- logit_edits.cuh ---------------------------------------------------------------------------
// logits[e.row, e.token] = apply_logit_edit(logits[e.row, e.token], e) for each of n edits, unique
// per (row, token). logits [rows, vocab] fp32. Runs before launch_sample. Rows whose sequence has
// a token still being sampled (num_pending entries; pending_slot [rows]: the row's last-token slot
// or -1) take, for that token t = last_tokens[slot], apply_logit_edit(logit, pending_edit(...))
// instead of their listed edit for t (gpu/logit_edit.hpp).
result<void> launch_logit_edits(float* logits, const logit_edit* edits, int32_t n, int32_t vocab,
                                cudaStream_t stream, const pending_penalty* pending = nullptr,
                                int32_t num_pending = 0, const int32_t* pending_slot = nullptr,
                                const int32_t* last_tokens = nullptr);

// Penalties from the token counts kept on the device (gpu/logit_edit.hpp: k_count_prompt_bit).
// counts [penalty rows, vocab]. launch_penalty_counts: for each sampled row r < rows whose
// params[r].penalty_row p >= 0, logits[r, t] = apply_penalty_count(logits[r, t], counts[p, t],
// its repetition, presence, frequency); after launch_logit_edits, before the grammar mask and
// launch_sample. launch_count_sampled: counts[p, tokens[r]] += 1 for those rows (after sampling).
// launch_penalty_rows_init: rows reset_rows[0..num_reset) zeroed, then counts[e.row, e.token] =
// e.value for each entry.
result<void> launch_penalty_counts(float* logits, const sample_row_params* params, int32_t rows,
                                   int32_t vocab, const uint32_t* counts, cudaStream_t stream);
result<void> launch_count_sampled(uint32_t* counts, const sample_row_params* params,
                                  const int32_t* tokens, int32_t rows, int32_t vocab,
                                  cudaStream_t stream);
result<void> launch_penalty_rows_init(uint32_t* counts, const int32_t* reset_rows,
                                      int32_t num_reset, const penalty_count_entry* entries,
                                      int32_t num_entries, int32_t vocab, cudaStream_t stream);

// ---- token_bitmask.cuh -------------------------------------------------------------------------
// Structured outputs: for each g < num_rows, logits[rows[g], i] = -inf wherever bit (i % 32) of
// masks[g * words + i / 32] is clear (xgrammar's bitmask layout). logits [*, vocab] fp32.
result<void> launch_token_bitmask(float* logits, const int32_t* rows, const uint32_t* masks,
                                  int32_t num_rows, int32_t words, int32_t vocab,
                                  cudaStream_t stream);

// ---- dummy_init.cuh -----------------------------------------------------------------------------
// Fills n bf16 values with uniform(-scale, scale) from uniform01(seed, 0, index): random weights
// for
// --load-format dummy, generated on the device (no host transfer). fill_bf16 writes a constant.
result<void> launch_fill_random_bf16(bf16* data, int64_t n, float scale, uint64_t seed,
                                     cudaStream_t stream);
result<void> launch_fill_bf16(bf16* data, int64_t n, float value, cudaStream_t stream);

}  // namespace coserve::gpu
