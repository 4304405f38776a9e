// Logits processors (penalties, logit_bias, min_tokens), see gpu/logit_edit.hpp, whose
// apply_logit_edit and apply_penalty_count are also the CPU references: sparse edits, and the
// penalties of sequences whose token counts are kept on the device.
#pragma once

#include "gpu/kernels.hpp"
#include "gpu/kernels/common.cuh"
#include "gpu/logit_edit.hpp"
#include "gpu/sample_row_params.hpp"

namespace coserve::gpu {
namespace kern {

// ---- kernels ----
// One thread per edit; edits are unique per (row, token), so writes never collide. A row with a
// pending token (pending_slot[row] >= 0) leaves that token's logit to pending_penalty_kernel.
__global__ void logit_edits_kernel(float* __restrict__ logits, const logit_edit* __restrict__ edits,
                                   int32_t n, int32_t vocab,
                                   const int32_t* __restrict__ pending_slot,
                                   const int32_t* __restrict__ last_tokens) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const logit_edit e = edits[i];
  if (pending_slot != nullptr && pending_slot[e.row] >= 0 &&
      last_tokens[pending_slot[e.row]] == e.token)
    return;
  float* l = logits + int64_t(e.row) * vocab + e.token;
  *l = apply_logit_edit(*l, e);
}

// One thread per pending row: its pending token's logit with the edit counting that token.
__global__ void pending_penalty_kernel(float* __restrict__ logits,
                                       const logit_edit* __restrict__ edits,
                                       const pending_penalty* __restrict__ pending, int32_t n,
                                       int32_t vocab, const int32_t* __restrict__ last_tokens) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const pending_penalty pp = pending[i];
  const int32_t t = last_tokens[pp.slot];
  if (t < 0 || t >= vocab) return;
  float* l = logits + int64_t(pp.row) * vocab + t;
  *l = apply_logit_edit(*l, pending_edit(edits, pp, t));
}

// Blocks of 256 threads per row of counts: enough to stream a 128k-token row from several SMs.
inline unsigned blocks_per_count_row(int32_t vocab) {
  return unsigned(std::min(8, (vocab + 1023) / 1024));
}

// Grid (x, rows): the blocks of row y stride over its vocabulary; a row without a penalty row
// returns at once. Only tokens with a non-zero count word are read from the logits and written.
__global__ void penalty_counts_kernel(float* __restrict__ logits,
                                      const sample_row_params* __restrict__ params,
                                      const uint32_t* __restrict__ counts, int32_t vocab) {
  const int32_t row = int32_t(blockIdx.y);
  const int32_t prow = params[row].penalty_row;
  if (prow < 0) return;
  const float rep = params[row].repetition, pres = params[row].presence,
              freq = params[row].frequency;
  const uint32_t* c = counts + int64_t(prow) * vocab;
  float* l = logits + int64_t(row) * vocab;
  for (int32_t t = int32_t(blockIdx.x * blockDim.x + threadIdx.x); t < vocab;
       t += int32_t(gridDim.x * blockDim.x)) {
    const uint32_t v = c[t];
    if (v != 0) l[t] = apply_penalty_count(l[t], v, rep, pres, freq);
  }
}

// One thread per sampled row: its token counted in its penalty row.
__global__ void count_sampled_kernel(uint32_t* __restrict__ counts,
                                     const sample_row_params* __restrict__ params,
                                     const int32_t* __restrict__ tokens, int32_t rows,
                                     int32_t vocab) {
  const int32_t r = int32_t(blockIdx.x * blockDim.x + threadIdx.x);
  if (r >= rows) return;
  const int32_t prow = params[r].penalty_row;
  const int32_t t = tokens[r];
  if (prow < 0 || t < 0 || t >= vocab) return;
  atomicAdd(counts + int64_t(prow) * vocab + t, 1u);
}

// Grid (x, n): row rows[y] zeroed.
__global__ void reset_penalty_rows_kernel(uint32_t* __restrict__ counts,
                                          const int32_t* __restrict__ rows, int32_t vocab) {
  uint32_t* c = counts + int64_t(rows[blockIdx.y]) * vocab;
  for (int32_t t = int32_t(blockIdx.x * blockDim.x + threadIdx.x); t < vocab;
       t += int32_t(gridDim.x * blockDim.x))
    c[t] = 0;
}

__global__ void penalty_entries_kernel(uint32_t* __restrict__ counts,
                                       const penalty_count_entry* __restrict__ entries, int32_t n,
                                       int32_t vocab) {
  const int32_t i = int32_t(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  const penalty_count_entry e = entries[i];
  if (e.token >= 0 && e.token < vocab) counts[int64_t(e.row) * vocab + e.token] = e.value;
}

}  // namespace kern

// ---- launchers ----
result<void> launch_penalty_counts(float* logits, const sample_row_params* params, int32_t rows,
                                   int32_t vocab, const uint32_t* counts, cudaStream_t stream) {
  if (rows < 0 || vocab <= 0 || rows > 65535)
    return make_error("invalid_argument", "penalty_counts: bad shape");
  if (rows == 0) return {};
  kern::penalty_counts_kernel<<<dim3(kern::blocks_per_count_row(vocab), unsigned(rows)), 256, 0,
                                stream>>>(logits, params, counts, vocab);
  return kern::check_launch("penalty_counts_kernel");
}

result<void> launch_count_sampled(uint32_t* counts, const sample_row_params* params,
                                  const int32_t* tokens, int32_t rows, int32_t vocab,
                                  cudaStream_t stream) {
  if (rows < 0 || vocab <= 0) return make_error("invalid_argument", "count_sampled: bad shape");
  if (rows == 0) return {};
  kern::count_sampled_kernel<<<unsigned((rows + 127) / 128), 128, 0, stream>>>(counts, params,
                                                                               tokens, rows, vocab);
  return kern::check_launch("count_sampled_kernel");
}

result<void> launch_penalty_rows_init(uint32_t* counts, const int32_t* reset_rows,
                                      int32_t num_reset, const penalty_count_entry* entries,
                                      int32_t num_entries, int32_t vocab, cudaStream_t stream) {
  if (num_reset < 0 || num_entries < 0 || vocab <= 0 || num_reset > 65535)
    return make_error("invalid_argument", "penalty_rows_init: bad shape");
  if (num_reset > 0) {
    kern::reset_penalty_rows_kernel<<<dim3(kern::blocks_per_count_row(vocab), unsigned(num_reset)),
                                      256, 0, stream>>>(counts, reset_rows, vocab);
    COSERVE_CUDA_TRY(kern::check_launch("reset_penalty_rows_kernel"));
  }
  if (num_entries == 0) return {};
  kern::penalty_entries_kernel<<<unsigned((num_entries + 255) / 256), 256, 0, stream>>>(
      counts, entries, num_entries, vocab);
  return kern::check_launch("penalty_entries_kernel");
}

result<void> launch_logit_edits(float* logits, const logit_edit* edits, int32_t n, int32_t vocab,
                                cudaStream_t stream, const pending_penalty* pending,
                                int32_t num_pending, const int32_t* pending_slot,
                                const int32_t* last_tokens) {
  if (n < 0 || vocab <= 0 || num_pending < 0 ||
      (num_pending > 0 && (pending_slot == nullptr || last_tokens == nullptr)))
    return make_error("invalid_argument", "logit_edits: bad shape");
  if (n > 0) {
    kern::logit_edits_kernel<<<unsigned((n + 255) / 256), 256, 0, stream>>>(
        logits, edits, n, vocab, num_pending > 0 ? pending_slot : nullptr, last_tokens);
    COSERVE_CUDA_TRY(kern::check_launch("logit_edits_kernel"));
  }
  if (num_pending == 0) return {};
  kern::pending_penalty_kernel<<<unsigned((num_pending + 127) / 128), 128, 0, stream>>>(
      logits, edits, pending, num_pending, vocab, last_tokens);
  return kern::check_launch("pending_penalty_kernel");
}

}  // namespace coserve::gpu
