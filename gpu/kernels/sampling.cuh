// Sampling on the device: greedy, temperature, top-k, top-p, min-p, seeded (Gumbel-max over the
// kept set with counter-based uniforms). CPU reference: gpu/reference/sampling_ref.hpp.
//
// Truncation without sorting: every filter is "keep x >= threshold", and each threshold is found by
// a radix select over the order-preserving 32-bit key of a float, most significant byte first: per
// byte one pass over the row builds a 256-bucket histogram (in shared memory) of the keys that
// match the bytes chosen so far, and one warp scans it from the top for the bucket where the
// running weight reaches the target. Four passes for top-k (weights: counts) and four for top-p
// (weights: probability mass in 32.32 fixed point, so the integer atomics make the sums exact and
// the choice independent of thread order), after one pass for the max and one for the total mass:
// about ten passes per sampled row instead of the 68 of a bisection. The row (vocab * 4 bytes)
// stays in L2 across passes. Ties at a threshold are all kept.
#pragma once

#include "gpu/kernels.hpp"
#include "gpu/kernels/common.cuh"
#include "gpu/rng.hpp"

namespace coserve::gpu {
namespace kern {

struct arg_best {
  float v;
  int32_t i;
};
// Larger value wins; among equal values the lower index.
__device__ __forceinline__ arg_best better(arg_best a, arg_best b) {
  if (b.v > a.v || (b.v == a.v && b.i < a.i)) return b;
  return a;
}
__device__ arg_best block_argmax(arg_best x, arg_best* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) {
    arg_best y{__shfl_xor_sync(0xffffffffu, x.v, o), __shfl_xor_sync(0xffffffffu, x.i, o)};
    x = better(x, y);
  }
  __syncthreads();
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < nw ? scratch[lane] : arg_best{-INFINITY, 0x7fffffff};
  for (int o = 16; o > 0; o >>= 1) {
    arg_best y{__shfl_xor_sync(0xffffffffu, x.v, o), __shfl_xor_sync(0xffffffffu, x.i, o)};
    x = better(x, y);
  }
  return x;
}

__device__ __forceinline__ uint32_t key_of(float f) { return float_order_key(__float_as_uint(f)); }

// Fixed-point weight of exp(v - mx) (<= 1): 32 fraction bits, so a row of up to 2^31 entries sums
// without overflow and the sum is the same whatever the order of the additions.
__device__ __forceinline__ unsigned long long mass_fx(float v, float mx) {
  return __float2ull_rn(expf(v - mx) * 4294967296.0f);
}

// The largest key T with  W(T) = sum of weight(v) over entries v = x[i] * inv_t whose key is >= T
// and >= floor  at least `target`, by a radix select (four passes, most significant byte first).
// Returns floor when even W(floor) is short of the target (every entry at or above floor stays).
// hist: 256 words of shared memory, pick: 2 (the chosen bucket and the weight above it, passed from
// the scanning warp to the block); every thread of the block calls it.
template <class Weight>
__device__ uint32_t radix_threshold(const float* x, int32_t vocab, float inv_t, uint32_t floor,
                                    unsigned long long target, const Weight& weight,
                                    unsigned long long* hist, unsigned long long* pick) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint32_t prefix = 0;
  unsigned long long above = 0;  // weight of the entries above the chosen buckets
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
    __syncthreads();
    const uint32_t high = shift == 24 ? 0u : 0xffffffffu << (shift + 8);  // the bytes chosen so far
    // Logits crowd into a few buckets (the first byte is the sign and most of the exponent), so
    // one shared-memory atomic per entry would serialize the block on those words: each thread
    // sums its run of entries in one bucket in a register and adds the run when the bucket changes
    // (integer sums: the histogram is the same).
    uint32_t run_bucket = 0;
    unsigned long long run = 0;
    for (int32_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const float v = x[i] * inv_t;
      const uint32_t k = key_of(v);
      if (k < floor || (k & high) != prefix) continue;
      const uint32_t b = (k >> shift) & 255u;
      if (b != run_bucket) {
        if (run != 0) atomicAdd(&hist[run_bucket], run);
        run_bucket = b;
        run = 0;
      }
      run += weight(v);
    }
    if (run != 0) atomicAdd(&hist[run_bucket], run);
    __syncthreads();
    if (warp == 0) {
      // Lane l holds buckets 255 - 8l down to 248 - 8l; an inclusive scan over lanes gives each
      // lane the weight of every bucket above its own last one.
      unsigned long long local[8], sum = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        local[j] = hist[255 - 8 * lane - j];
        sum += local[j];
      }
      unsigned long long incl = sum;
      for (int o = 1; o < 32; o <<= 1) {
        const unsigned long long y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += y;
      }
      const unsigned mask = __ballot_sync(0xffffffffu, above + incl >= target);
      const int first = mask ? __ffs(mask) - 1 : 31;
      if (lane == first) {
        unsigned long long acc = above + incl - sum;
        int bucket = 0;
        for (int j = 0; j < 8; ++j) {
          bucket = 255 - 8 * lane - j;
          if (acc + local[j] >= target) break;
          if (j < 7) acc += local[j];
        }
        pick[0] = (unsigned long long)bucket;
        pick[1] = acc;
      }
    }
    __syncthreads();
    prefix |= uint32_t(pick[0]) << shift;
    above = pick[1];
    __syncthreads();  // pick read by every thread before the next pass writes it
  }
  return max(prefix, floor);
}

// The row's top n entries among those keep(i, v) admits, v = value_of(i), in (value desc, index
// asc) order: one block-wide argmax per entry over the values after the previous entry in that
// order (no sort, nothing written to the row). out gets (id, v - offset as f32 bits) pairs; an id
// of -1 ends a list shorter than n. Every thread of the block calls it.
template <class Value, class Keep>
__device__ void write_top_n(uint32_t* out, int32_t n, int32_t vocab, float offset,
                            const Value& value_of, const Keep& keep, arg_best* scratch) {
  arg_best prev{0.0f, -1};
  for (int32_t r = 0; r < n; ++r) {
    arg_best c{-INFINITY, 0x7fffffff};
    for (int32_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const float v = value_of(i);
      if (keep(i, v) && (r == 0 || prev.v > v || (prev.v == v && prev.i < i)))
        c = better(c, arg_best{v, i});
    }
    c = block_argmax(c, scratch);  // the same in every thread
    if (threadIdx.x == 0) {
      out[2 * r] = uint32_t(c.i < vocab ? c.i : -1);
      out[2 * r + 1] = __float_as_uint(c.v - offset);
    }
    if (c.i >= vocab) return;
    prev = c;
  }
}

// ---- kernels ----
// One block (1024 threads) per row. Rows may hold -inf (masked by logit edits).
__global__ void __launch_bounds__(1024)
    sample_kernel(int32_t* __restrict__ out_tok, float* __restrict__ out_lp,
                  const float* __restrict__ logits, const sample_row_params* __restrict__ params,
                  int32_t vocab, uint32_t* __restrict__ out_top) {
  __shared__ float scratch[32];
  __shared__ arg_best best_scratch[32];
  __shared__ unsigned long long hist[256], pick[2], total_scratch[32];
  const int32_t row = blockIdx.x;
  const sample_row_params p = params[row];
  const float* x = logits + int64_t(row) * vocab;
  const bool greedy = p.temperature <= 0.0f;
  const float inv_t = greedy ? 1.0f : 1.0f / p.temperature;

  float mx = -INFINITY;
  for (int32_t i = threadIdx.x; i < vocab; i += blockDim.x) mx = fmaxf(mx, x[i] * inv_t);
  mx = block_max(mx, scratch);

  uint32_t thr = 0;  // keep key(x * inv_t) >= thr
  if (!greedy) {
    if (p.top_k > 0 &&
        p.top_k < vocab)  // the k-th largest key: k entries (and its ties) at or above it
      thr = radix_threshold(
          x, vocab, inv_t, 0u, (unsigned long long)p.top_k, [](float) { return 1ull; }, hist, pick);
    if (p.top_p < 1.0f) {
      // The smallest set of largest values whose mass reaches top_p of the mass top-k left.
      unsigned long long total = 0;
      for (int32_t i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float v = x[i] * inv_t;
        if (key_of(v) >= thr) total += mass_fx(v, mx);
      }
      total = block_sum_u64(total, total_scratch);
      const unsigned long long want = (unsigned long long)ceil(double(p.top_p) * double(total));
      thr = radix_threshold(
          x, vocab, inv_t, thr, want, [mx](float v) { return mass_fx(v, mx); }, hist, pick);
    }
    if (p.min_p > 0.0f) thr = max(thr, key_of(mx + logf(p.min_p)));
  }

  // log-normalizer over the kept set: logprobs are those of the processed (truncated) row.
  float z = 0.0f;
  for (int32_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float v = x[i] * inv_t;
    z += key_of(v) >= thr ? expf(v - mx) : 0.0f;
  }
  const float log_z = logf(block_sum(z, scratch));

  arg_best b{-INFINITY, 0x7fffffff};
  for (int32_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float v = x[i] * inv_t;
    if (greedy) {
      b = better(b, arg_best{v, i});
    } else if (key_of(v) >= thr) {
      const float u = uniform01(p.seed, p.counter, uint64_t(i));
      b = better(b, arg_best{v - logf(-logf(u)), i});
    }
  }
  b = block_argmax(b, best_scratch);
  if (threadIdx.x == 0) {
    const int32_t tok = b.i < vocab ? b.i : 0;
    out_tok[row] = tok;
    out_lp[row] = x[tok] * inv_t - mx - log_z;
  }
  if (out_top == nullptr || p.top_n <= 0) return;
  // Top logprobs of the processed row: its kept, finite values.
  write_top_n(
      out_top + int64_t(row) * k_top_logprob_words, min(p.top_n, k_top_logprobs_max), vocab,
      mx + log_z, [&](int32_t i) { return x[i] * inv_t; },
      [&](int32_t, float v) { return key_of(v) >= thr && v > -INFINITY; }, best_scratch);
}

// One block (1024 threads) per row: the log-normalizer, the target's logprob and rank, then the
// top_n entries of the raw row (write_top_n).
__global__ void __launch_bounds__(1024)
    prompt_logprobs_kernel(uint32_t* __restrict__ out, const float* __restrict__ logits,
                           const int32_t* __restrict__ targets, int32_t vocab, int32_t top_n,
                           int32_t stride) {
  __shared__ float scratch[32];
  __shared__ arg_best best_scratch[32];
  const int32_t row = blockIdx.x;
  const float* x = logits + int64_t(row) * vocab;
  float mx = -INFINITY;
  for (int32_t i = threadIdx.x; i < vocab; i += blockDim.x) mx = fmaxf(mx, x[i]);
  mx = block_max(mx, scratch);
  float z = 0.0f;
  for (int32_t i = threadIdx.x; i < vocab; i += blockDim.x) z += expf(x[i] - mx);
  const float lse = mx + logf(block_sum(z, scratch));
  const float at = x[targets[row]];
  float above = 0.0f;  // exact: vocab < 2^24
  for (int32_t i = threadIdx.x; i < vocab; i += blockDim.x) above += x[i] > at ? 1.0f : 0.0f;
  above = block_sum(above, scratch);
  uint32_t* o = out + int64_t(row) * stride;
  if (threadIdx.x == 0) {
    o[0] = __float_as_uint(at - lse);
    o[1] = uint32_t(1 + int32_t(above));
  }
  write_top_n(
      o + 2, top_n, vocab, lse, [&](int32_t i) { return x[i]; },
      [](int32_t, float) { return true; }, best_scratch);
}

}  // namespace kern

// ---- launchers ----
result<void> launch_sample(int32_t* out_tokens, float* out_logprobs, const float* logits,
                           const sample_row_params* params, int32_t num_rows, int32_t vocab,
                           cudaStream_t stream, uint32_t* out_top) {
  if (vocab <= 0 || num_rows < 0) return make_error("invalid_argument", "sample: bad shape");
  if (num_rows == 0) return {};
  kern::sample_kernel<<<num_rows, 1024, 0, stream>>>(out_tokens, out_logprobs, logits, params,
                                                     vocab, out_top);
  return kern::check_launch("sample_kernel");
}

result<void> launch_prompt_logprobs(uint32_t* out, const float* logits, const int32_t* targets,
                                    int32_t num_rows, int32_t vocab, int32_t top_n, int32_t stride,
                                    cudaStream_t stream) {
  if (vocab <= 0 || num_rows < 0 || top_n < 0 || stride < 2 + 2 * top_n)
    return make_error("invalid_argument", "prompt_logprobs: bad shape");
  if (num_rows == 0) return {};
  kern::prompt_logprobs_kernel<<<num_rows, 1024, 0, stream>>>(out, logits, targets, vocab, top_n,
                                                              stride);
  return kern::check_launch("prompt_logprobs_kernel");
}

}  // namespace coserve::gpu
