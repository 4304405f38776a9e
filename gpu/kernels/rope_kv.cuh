// RoPE fused with the paged KV write. The scaling types differ in inv_freq (computed on the host,
// model/rope.cpp), the cos/sin scale (YaRN, LongRoPE), LongRoPE's second inv_freq from a position
// on, and how many dimensions rotate (partial rotary). CPU reference:
// gpu/reference/rope_kv_ref.hpp.
#pragma once

#include "gpu/kernels.hpp"
#include "gpu/kernels/common.cuh"

namespace coserve::gpu {
namespace kern {

// ---- kernels ----
// One block per token. Rotation pairs (i, i + half) of every q and k head are independent, so each
// thread owns whole pairs: no barrier between the rotation and the cache write of the same values.
template <kv_elem KV>
__global__ void rope_kv_kernel(rope_kv_args a) {
  const int32_t t = blockIdx.x;
  const int32_t D = a.head_dim, half = a.rotate ? (a.rotary_dim > 0 ? a.rotary_dim : D) / 2 : 0;
  const int64_t row = int64_t(a.num_q_heads + 2 * a.num_kv_heads) * D;
  bf16* base = a.qkv + int64_t(t) * row;
  const float pos = float(a.positions[t]);
  const float* inv_freq =
      a.inv_freq_long && a.positions[t] >= a.long_from ? a.inv_freq_long : a.inv_freq;
  const int32_t slot = a.slot_mapping[t];
  const int64_t cache_row = int64_t(slot) * a.num_kv_heads * D;  // slot * (kv_heads * D)
  const int32_t rot_heads = a.num_q_heads + a.num_kv_heads;
  for (int32_t k = threadIdx.x; k < rot_heads * half; k += blockDim.x) {
    const int32_t h = k / half, i = k % half;
    float s, c;
    sincosf(pos * inv_freq[i], &s, &c);
    s *= a.scale;
    c *= a.scale;
    bf16* v = base + int64_t(h) * D;
    const float x1 = to_f(v[i]), x2 = to_f(v[i + half]);
    const bf16 o1 = to_bf(x1 * c - x2 * s), o2 = to_bf(x2 * c + x1 * s);
    v[i] = o1;
    v[i + half] = o2;
    if (h >= a.num_q_heads && slot >= 0) {
      const int64_t kc = cache_row + int64_t(h - a.num_q_heads) * D;
      store_kv<KV>(a.k_cache, kc + i, to_f(o1));
      store_kv<KV>(a.k_cache, kc + i + half, to_f(o2));
    }
  }
  if (slot < 0) return;  // padding token: no cache write
  const int32_t pass =
      D - 2 * half;  // partial rotary or NoPE: k dimensions past the rotated ones, as they are
  for (int32_t k = threadIdx.x; k < a.num_kv_heads * pass; k += blockDim.x) {
    const int32_t h = k / pass, i = 2 * half + k % pass;
    store_kv<KV>(a.k_cache, cache_row + int64_t(h) * D + i,
                 to_f(base[int64_t(a.num_q_heads + h) * D + i]));
  }
  const bf16* vsrc = base + int64_t(rot_heads) * D;
  for (int32_t k = threadIdx.x; k < a.num_kv_heads * D; k += blockDim.x)
    store_kv<KV>(a.v_cache, cache_row + k, to_f(vsrc[k]));
}

}  // namespace kern

// ---- launchers ----
result<void> launch_rope_kv_write(const rope_kv_args& a, cudaStream_t stream) {
  if (a.head_dim <= 0 || a.head_dim % 2 != 0 || a.num_q_heads <= 0 || a.num_kv_heads <= 0 ||
      a.num_tokens < 0 || a.rotary_dim < 0 || a.rotary_dim % 2 != 0 || a.rotary_dim > a.head_dim)
    return make_error("invalid_argument", "rope_kv_write: bad shape");
  if (a.num_tokens == 0) return {};
  switch (a.kv_type) {
    case kv_elem::bf16:
      kern::rope_kv_kernel<kv_elem::bf16><<<a.num_tokens, 256, 0, stream>>>(a);
      break;
    case kv_elem::fp8_e4m3:
      kern::rope_kv_kernel<kv_elem::fp8_e4m3><<<a.num_tokens, 256, 0, stream>>>(a);
      break;
    case kv_elem::fp8_e5m2:
      kern::rope_kv_kernel<kv_elem::fp8_e5m2><<<a.num_tokens, 256, 0, stream>>>(a);
      break;
  }
  return kern::check_launch("rope_kv_kernel");
}

}  // namespace coserve::gpu
