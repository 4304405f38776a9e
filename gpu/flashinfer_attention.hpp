// Paged attention from FlashInfer (header-only CUDA, fetched by scripts/deps from the
// flashinfer-python wheel): its FA2 batch-prefill kernel over the paged KV cache (tensor cores,
// causal, GQA packed into the query tile, split-KV with a merge pass) runs every step of the CUDA
// executor under --attention-backend flashinfer: prefill chunks and decodes in one launch (decode
// rows are one-token queries, as FlashInfer's tensor-core decode path), instantiated for bf16
// q/k/v, head_dim 64 and 128, and the query tiles (16, 64, 128) its scheduler chooses from.
//
// Planning is the host's, once per step, as FlashInfer's plan/run split: plan_flashinfer turns a
// batch_plan into FlashInfer's page table (indptr, indices, last-page lengths) and its work
// schedule (FlashInfer's own PrefillSplitQOKVIndptr: query tiles x KV chunks per request), and the
// arrays travel with the rest of the step's metadata (one upload; tensor-parallel peers get the
// same bytes). Under CUDA graphs the plan is made in FlashInfer's CUDA-graph mode: a fixed grid per
// bucket (padded_batch_size, the tile size and the split fixed at capture), block_valid_mask and
// total_num_rows read from device memory.
//
// Built only when the headers are found (COSERVE_HAVE_FLASHINFER); otherwise flashinfer_built() is
// false and the executor refuses the backend at startup.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/result.hpp"
#include "gpu/batch_plan.hpp"

typedef struct CUstream_st* cudaStream_t;

namespace coserve::gpu {

// The FlashInfer headers were found at build time (the kernels and the planner are linked in).
bool flashinfer_built() noexcept;
// Shapes the instantiated kernels take: head_dim 64 or 128, whole GQA groups.
bool flashinfer_supports(int32_t num_qo_heads, int32_t num_kv_heads, int32_t head_dim) noexcept;

struct fi_options {
  int32_t num_qo_heads = 0, num_kv_heads = 0, head_dim = 0;
  int32_t page_size = 16;
  int32_t num_sms =
      132;  // the device's multiprocessors (FlashInfer sizes its grid at 2 CTAs per SM)
  int32_t window_left = -1;  // sliding window: keys [pos - window_left, pos]; -1: none
  bool cuda_graph = false;   // FlashInfer's CUDA-graph mode (fixed grid)
  bool disable_split_kv =
      false;  // one KV chunk per sequence (no merge, no split workspace); eager only
};

// One step's plan in FlashInfer's form (its PrefillPlan's arrays, made on the host).
struct fi_schedule {
  int32_t batch_size = 0;      // sequences (FlashInfer's requests)
  int32_t total_num_rows = 0;  // query tokens
  // paged KV: sequence i's pages are kv_indices[kv_indptr[i], kv_indptr[i + 1]); its last page
  // holds kv_last_page_len[i] keys (kv_len = (pages - 1) * page_size + last)
  std::vector<int32_t> kv_indptr, kv_indices, kv_last_page_len;
  // the work list: one CTA row per (request, query tile, KV chunk), padded to padded_batch_size
  std::vector<int32_t> request_indices, qo_tile_indices, kv_tile_indices;
  std::vector<int32_t> o_indptr;          // [batch_size + 1] partial rows per request (split-KV)
  std::vector<int32_t> merge_indptr;      // [total_num_rows + 1] chunks per query row (split-KV)
  std::vector<uint8_t> block_valid_mask;  // [padded_batch_size] (CUDA-graph mode)
  int32_t kv_chunk_size = 0;              // keys per KV chunk
  int32_t padded_batch_size = 0;          // the grid's x dimension
  int32_t new_batch_size = 0;             // CTA rows with work
  int32_t cta_tile_q = 0;                 // packed query rows (tokens x GQA) per CTA: 16, 64 or 128
  bool split_kv = false;
  bool cuda_graph = false;
  // Rows of the split workspace the step needs (tmp_v: rows x num_qo_heads x head_dim floats).
  int64_t tmp_rows() const { return split_kv ? int64_t(padded_batch_size) * cta_tile_q : 0; }
};

// Plans one step from our batch plan (its cu_seqlens_q, kv_lens and block tables). Errors
// (invalid_argument): a shape the kernels do not take, a block table shorter than its keys, or
// FlashInfer's planner refusing the batch.
result<fi_schedule> plan_flashinfer(const batch_plan& p, const fi_options& o);
// The same into `out`, reusing its arrays' capacity (the executor plans every step into one).
result<void> plan_flashinfer(const batch_plan& p, const fi_options& o, fi_schedule& out);

// Where a schedule's arrays lie in a metadata buffer (16-byte aligned offsets).
struct fi_offsets {
  size_t kv_indptr = 0, kv_indices = 0, kv_last_page_len = 0, request_indices = 0,
         qo_tile_indices = 0, kv_tile_indices = 0, o_indptr = 0, merge_indptr = 0,
         kv_chunk_size = 0, total_num_rows = 0, block_valid_mask = 0;
  size_t end = 0;  // one past the last array
};
// Fixed offsets for CUDA graphs, from `at`: capacities for `rows` sequences of at most
// max_blocks_per_seq pages, at most max_padded CTA rows.
fi_offsets fi_graph_offsets(size_t at, int32_t rows, int32_t max_blocks_per_seq,
                            int32_t max_padded);
// Offsets that hold exactly this schedule, from `at`.
fi_offsets fi_exact_offsets(size_t at, const fi_schedule& s);
// Writes the schedule's arrays at `o` into staging. Errors: an array beyond the capacity the
// offsets leave it (the next offset), or staging too small.
result<void> write_fi_schedule(const fi_schedule& s, const fi_offsets& o,
                               std::span<std::byte> staging);

// What the attention launch reads for a step: device addresses (the schedule's arrays uploaded at
// fi_offsets from `base`), the query offsets (our cu_seqlens_q) and the schedule's scalars.
struct fi_step {
  bool on = false;
  const int32_t *qo_indptr = nullptr, *kv_indptr = nullptr, *kv_indices = nullptr,
                *kv_last_page_len = nullptr;
  const int32_t *request_indices = nullptr, *qo_tile_indices = nullptr, *kv_tile_indices = nullptr;
  const int32_t *o_indptr = nullptr, *merge_indptr = nullptr, *kv_chunk_size = nullptr;
  const uint32_t* total_num_rows = nullptr;
  const uint8_t* block_valid_mask = nullptr;
  int32_t batch_size = 0, num_rows = 0, padded_batch_size = 0, cta_tile_q = 0;
  bool split_kv = false, cuda_graph = false;
};
fi_step fi_step_at(const fi_schedule& s, const fi_offsets& o, const void* base,
                   const int32_t* qo_indptr);

struct fi_attention_args {
  const void* q;  // bf16 [num_tokens, q_stride]; head h at q + t * q_stride + h * head_dim
  int64_t q_stride;
  void* k_cache;  // bf16 [pages, page_size, num_kv_heads, head_dim] (NHD)
  void* v_cache;
  void* out;     // bf16 [num_tokens, num_qo_heads * head_dim]
  void* tmp_v;   // split-KV workspace: tmp_rows x num_qo_heads x head_dim bf16 partial outputs
  float* tmp_s;  // tmp_rows x num_qo_heads partial log-sum-exps
  int32_t num_qo_heads, num_kv_heads, head_dim, page_size;
  int32_t window_left;  // -1: none
  float sm_scale;
};
// Enqueues the attention of one layer for the step. Errors: an unsupported shape, a split plan
// without a workspace, or a launch error.
result<void> launch_flashinfer_attention(const fi_attention_args& a, const fi_step& s,
                                         cudaStream_t stream);

}  // namespace coserve::gpu
