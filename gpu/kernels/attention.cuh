// Paged causal attention for mixed batches (prefill chunks and decodes), split over KV for long
// contexts, with a merge pass. CPU reference: gpu/reference/attention_ref.hpp.
//
// Loop order as in FlashAttention-2: a block owns a tile of queries (q_tile tokens x the gqa query
// heads of one kv head) and streams the keys in tiles of 32 through shared memory, keeping a
// running max / sum / output per query row (online softmax), so scores never reach device memory.
// Each warp owns whole query rows; lane j scores key j of the tile, then every lane accumulates its
// head_dim/32 output columns. This first version uses CUDA cores (FFMA), not wgmma/tensor cores.
#pragma once

#include <cmath>

#include "gpu/kernels.hpp"
#include "gpu/kernels/common.cuh"
#include "gpu/launch_params.hpp"

namespace coserve::gpu {
namespace kern {

// ---- kernels ----
// grid (num_work, num_kv_heads), block k_attn_warps * 32 threads, dynamic shared memory
// attention_smem_bytes(gqa, D): q_s [rows][D] f32 (pre-scaled) | k_s [32][D+2] bf16 | v_s [32][D+2]
// bf16 (fp8 caches are widened to bf16 as the tile is staged).
template <int D, kv_elem KV>
__global__ void __launch_bounds__(k_attn_warps * 32)
    attention_kernel(attention_args a, int32_t gqa, int32_t q_tile) {
  constexpr int kPad = D + 2;
  constexpr int kCols = D / 32;
  constexpr int kMaxR = k_attn_max_rows_per_warp;
  extern __shared__ float smem[];
  const int32_t rows = q_tile * gqa;
  float* q_s = smem;
  bf16* k_s = reinterpret_cast<bf16*>(q_s + rows * D);
  bf16* v_s = k_s + k_attn_kv_tile * kPad;

  if (a.counts != nullptr && int32_t(blockIdx.x) >= a.counts[0])
    return;  // fixed grid (graphs): past the step's work
  const attn_work_item w = a.work[blockIdx.x];
  const int32_t kvh = blockIdx.y;
  const int32_t seq_q0 = a.cu_seqlens_q[w.seq];
  const int32_t seq_q_len = a.cu_seqlens_q[w.seq + 1] - seq_q0;
  const int32_t kv_len = a.kv_lens[w.seq];
  const int32_t first_pos = kv_len - seq_q_len + w.q_begin;  // position of the tile's first query
  const int32_t* table = a.block_tables + a.block_table_offsets[w.seq];
  const int32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  // Stage the query rows (scaled) in shared memory.
  for (int32_t k = threadIdx.x; k < rows * D; k += blockDim.x) {
    const int32_t r = k / D, d = k % D, tt = r / gqa, g = r % gqa;
    float v = 0.0f;
    if (tt < w.q_len) {
      const int64_t tok = seq_q0 + w.q_begin + tt;
      v = to_f(a.q[tok * a.q_stride + int64_t(kvh * gqa + g) * D + d]) * a.scale;
    }
    q_s[k] = v;
  }
  const int32_t last_pos = first_pos + w.q_len - 1;
  const int32_t kv_stop = min(w.kv_end, last_pos + 1);
  // Sliding window: keys before the tile's first query's window are seen by none of its queries.
  const int32_t kv_first = a.window > 0 ? max(w.kv_begin, first_pos - a.window + 1) : w.kv_begin;

  float acc[kMaxR][kCols];
  float m[kMaxR], l[kMaxR];
#pragma unroll
  for (int i = 0; i < kMaxR; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[i][c] = 0.0f;
  }

  for (int32_t kb = kv_first; kb < kv_stop; kb += k_attn_kv_tile) {
    __syncthreads();  // previous tile fully consumed (and q_s staged on the first pass)
    for (int32_t k = threadIdx.x; k < k_attn_kv_tile * (D / 2); k += blockDim.x) {
      const int32_t jj = k / (D / 2), d2 = k % (D / 2);
      const int32_t j = kb + jj;
      __nv_bfloat162 kv = __floats2bfloat162_rn(0.0f, 0.0f), vv = kv;
      if (j < kv_stop) {
        const int64_t slot = int64_t(table[j / a.block_size]) * a.block_size + j % a.block_size;
        const int64_t off = (slot * a.num_kv_heads + kvh) * D + 2 * d2;
        kv = load_kv2<KV>(a.k_cache, off);
        vv = load_kv2<KV>(a.v_cache, off);
      }
      *reinterpret_cast<__nv_bfloat162*>(k_s + jj * kPad + 2 * d2) = kv;
      *reinterpret_cast<__nv_bfloat162*>(v_s + jj * kPad + 2 * d2) = vv;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kMaxR; ++i) {
      const int32_t r = warp + i * k_attn_warps;
      if (r >= rows || r / gqa >= w.q_len) continue;  // warp-uniform
      const int32_t qpos = first_pos + r / gqa;
      const int32_t j = kb + lane;
      const bool valid = j < kv_stop && j <= qpos && (a.window <= 0 || j > qpos - a.window);
      float s = 0.0f;
      const float* qr = q_s + r * D;
      const __nv_bfloat162* kr = reinterpret_cast<const __nv_bfloat162*>(k_s + lane * kPad);
#pragma unroll 8
      for (int d2 = 0; d2 < D / 2; ++d2) {
        const float2 kf = __bfloat1622float2(kr[d2]);
        s += qr[2 * d2] * kf.x + qr[2 * d2 + 1] * kf.y;
      }
      s = valid ? s : -INFINITY;
      const float m_new = fmaxf(m[i], warp_max(s));
      if (m_new == -INFINITY) continue;  // nothing visible yet for this row (warp-uniform)
      const float p = valid ? expf(s - m_new) : 0.0f;
      const float corr = expf(m[i] - m_new);  // 0 when m was -inf
      l[i] = l[i] * corr + warp_sum(p);
      m[i] = m_new;
#pragma unroll
      for (int c = 0; c < kCols; ++c) acc[i][c] *= corr;
      for (int jj = 0; jj < k_attn_kv_tile; ++jj) {
        const float pj = __shfl_sync(0xffffffffu, p, jj);
        if (pj == 0.0f) continue;  // warp-uniform: pj is the same value in every lane
#pragma unroll
        for (int c = 0; c < kCols; ++c) acc[i][c] += pj * to_f(v_s[jj * kPad + lane + 32 * c]);
      }
    }
  }

#pragma unroll
  for (int i = 0; i < kMaxR; ++i) {
    const int32_t r = warp + i * k_attn_warps;
    if (r >= rows || r / gqa >= w.q_len) continue;
    const int32_t tt = r / gqa, qh = kvh * gqa + r % gqa;
    const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
    if (w.partial < 0) {
      bf16* o = a.out + (int64_t(seq_q0 + w.q_begin + tt) * a.num_q_heads + qh) * D;
#pragma unroll
      for (int c = 0; c < kCols; ++c) o[lane + 32 * c] = to_bf(acc[i][c] * inv);
    } else {
      const int64_t prow = int64_t(w.partial + tt) * a.num_q_heads + qh;
      float* o = a.partial_o + prow * D;
#pragma unroll
      for (int c = 0; c < kCols; ++c) o[lane + 32 * c] = acc[i][c] * inv;
      if (lane == 0) a.partial_lse[prow] = l[i] > 0.0f ? m[i] + logf(l[i]) : -INFINITY;
    }
  }
}

// grid (num_merges, num_q_heads), block D threads: thread d combines column d of every split,
// weighting split s by exp(lse_s - max lse).
__global__ void attention_merge_kernel(attention_args a) {
  if (a.counts != nullptr && int32_t(blockIdx.x) >= a.counts[1]) return;
  const attn_merge_item mi = a.merges[blockIdx.x];
  const int32_t h = blockIdx.y, d = threadIdx.x, D = a.head_dim;
  for (int32_t t = 0; t < mi.q_len; ++t) {
    float mx = -INFINITY;
    for (int32_t s = 0; s < mi.num_splits; ++s)
      mx = fmaxf(mx, a.partial_lse[int64_t(mi.partial + s * mi.q_len + t) * a.num_q_heads + h]);
    float num = 0.0f, den = 0.0f;
    if (mx != -INFINITY) {
      for (int32_t s = 0; s < mi.num_splits; ++s) {
        const int64_t prow = int64_t(mi.partial + s * mi.q_len + t) * a.num_q_heads + h;
        const float wgt = expf(a.partial_lse[prow] - mx);
        num += wgt * a.partial_o[prow * D + d];
        den += wgt;
      }
    }
    a.out[(int64_t(mi.token + t) * a.num_q_heads + h) * D + d] =
        to_bf(den > 0.0f ? num / den : 0.0f);
  }
}

}  // namespace kern

// ---- launchers ----
result<void> launch_attention(const attention_args& a, cudaStream_t stream) {
  if (a.num_kv_heads <= 0 || a.num_q_heads % a.num_kv_heads != 0 || a.block_size <= 0 ||
      a.window < 0)
    return make_error("invalid_argument",
                      "attention: num_q_heads must be a multiple of num_kv_heads");
  const int32_t gqa = a.num_q_heads / a.num_kv_heads;
  if (!attention_supported(gqa, a.head_dim))
    return make_error("invalid_argument",
                      "attention: unsupported head_dim (32, 64, 96, 128) or GQA ratio (<= 32)");
  if ((a.num_merges > 0 || a.counts != nullptr) &&
      (a.partial_o == nullptr || a.partial_lse == nullptr))
    return make_error("invalid_argument", "attention: split-KV plan without a partial workspace");
  if (a.num_work == 0) return {};
  const int32_t q_tile = attention_q_tile(gqa);
  const size_t smem = attention_smem_bytes(gqa, a.head_dim);
  const dim3 grid(unsigned(a.num_work), unsigned(a.num_kv_heads));
  auto launch = [&](auto kernel) {
    kernel<<<grid, k_attn_warps * 32, smem, stream>>>(a, gqa, q_tile);
  };
  // One instantiation per (head_dim, cache element) that attention_supported() admits.
  auto by_dim = [&]<kv_elem KV>() {
    switch (a.head_dim) {
      case 32:
        launch(kern::attention_kernel<32, KV>);
        break;
      case 64:
        launch(kern::attention_kernel<64, KV>);
        break;
      case 96:
        launch(kern::attention_kernel<96, KV>);
        break;
      default:
        launch(kern::attention_kernel<128, KV>);
        break;
    }
  };
  switch (a.kv_type) {
    case kv_elem::bf16:
      by_dim.template operator()<kv_elem::bf16>();
      break;
    case kv_elem::fp8_e4m3:
      by_dim.template operator()<kv_elem::fp8_e4m3>();
      break;
    case kv_elem::fp8_e5m2:
      by_dim.template operator()<kv_elem::fp8_e5m2>();
      break;
  }
  COSERVE_CUDA_TRY(kern::check_launch("attention_kernel"));
  if (a.num_merges == 0) return {};
  kern::attention_merge_kernel<<<dim3(unsigned(a.num_merges), unsigned(a.num_q_heads)),
                                 unsigned(a.head_dim), 0, stream>>>(a);
  return kern::check_launch("attention_merge_kernel");
}

}  // namespace coserve::gpu
