// Batched integer products for quantized weights on x86 (AVX2, AVX-512, AVX-512 VNNI): the path
// matmul_quantized takes when several activation rows meet each weight row (prefill, large decode
// batches). Compiled once per SIMD target by Highway; targets without the kernels return false.
//
// Layout: a tile of L weight rows (L = 8 on AVX2, 16 on AVX-512) is unpacked to unsigned bytes
// (Q8_0 + 128, Q4_0/Q4_1 nibbles, Q5_0/Q5_1 5-bit values, Q2_K 2-bit values, Q3_K values + 4,
// Q4_K/Q5_K 4-/5-bit values, Q6_K 6-bit values; the IQ4_NL/IQ4_XS grid values stay signed) and
// transposed so that 32-bit lane i of a vector holds four consecutive values of row i. One
// activation dword broadcast over the vector then makes 4 x L products per instruction
// (VPDPBUSD, or VPMADDUBSW + VPMADDWD without VNNI), and the per-block scales of the L rows are
// vectors too: one conversion and one FMA per block give L outputs. The weight offsets (Q8_0's
// +128, Q4_0's -8, Q5_0's -16, Q3_K's -4, Q6_K's -32) and minimums (Q4_1/Q5_1's m, the K types'
// mins) come from the activations' block sums. The tile is unpacked once per call and stays in
// L1/L2 while every activation row passes it; the file's blocks are only read.
// Q4_0 matrices that were repacked at load (weight_ref.packed) take matmul_packed_impl instead, at
// every batch size: the same lane layout, kept 4-bit, read straight from the repacked tiles.
// Over 500 lines: Highway compiles the file once per target, and the lane kernels of every type
// share its per-target vector helpers and tile layout.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "model/quant_gemm.cpp"
// clang-format off: foreach_target.h comes first (it includes this file again once per target)
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// clang-format on
#include <hwy/highway.h>

#if HWY_ARCH_X86
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <new>
#include <type_traits>

#include "model/cpu_kernels.hpp"
#include "model/quant.hpp"
#include "model/x86_bits.hpp"
#include "model/x86_transpose.hpp"

HWY_BEFORE_NAMESPACE();
// VPDPBUSD on the AVX3_DL target, with GCC: the pragma adds AVX512-VNNI to the target's flags (and
// drops the VEX AVX-VNNI that Highway 1.0 lists there). Clang does not combine a second target
// attribute with Highway's, so a clang build runs the AVX3_DL target on the AVX-512 products.
#undef COSERVE_VNNI
#if HWY_TARGET == HWY_AVX3_DL && HWY_COMPILER_GCC && !HWY_COMPILER_CLANG
#pragma GCC target("avx512vnni,no-avxvnni")
#define COSERVE_VNNI 1
#else
#define COSERVE_VNNI 0
#endif
namespace coserve {
namespace HWY_NAMESPACE {

#undef COSERVE_LANE_GEMM
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#define COSERVE_LANE_GEMM 1

#if HWY_TARGET == HWY_AVX2
constexpr int kLanes = 8;
using vi = __m256i;
using vf = __m256;
HWY_INLINE vi vzero() { return _mm256_setzero_si256(); }
HWY_INLINE vi vload(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
HWY_INLINE vi vset1(int32_t v) { return _mm256_set1_epi32(v); }
HWY_INLINE vi vadd(vi a, vi b) { return _mm256_add_epi32(a, b); }
HWY_INLINE vi vsub(vi a, vi b) { return _mm256_sub_epi32(a, b); }
HWY_INLINE vi vmullo(vi a, vi b) { return _mm256_mullo_epi32(a, b); }
HWY_INLINE vi vshl5(vi a) { return _mm256_slli_epi32(a, 5); }
HWY_INLINE vi vmadd16(vi a, vi b) { return _mm256_madd_epi16(a, b); }
HWY_INLINE vi vmaddubs(vi u, vi s) { return _mm256_maddubs_epi16(u, s); }
HWY_INLINE vi vones16() { return _mm256_set1_epi16(1); }
HWY_INLINE vi vadd16(vi a, vi b) { return _mm256_add_epi16(a, b); }
HWY_INLINE vf fzero() { return _mm256_setzero_ps(); }
HWY_INLINE vf fload(const float* p) { return _mm256_loadu_ps(p); }
HWY_INLINE vf fset1(float v) { return _mm256_set1_ps(v); }
HWY_INLINE vf fmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
HWY_INLINE vf ffma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
HWY_INLINE vf ffnma(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); }
HWY_INLINE vf fcvt(vi a) { return _mm256_cvtepi32_ps(a); }
HWY_INLINE void fstore(float* p, vf v) { _mm256_storeu_ps(p, v); }
HWY_INLINE vi vlow4(vi v) { return _mm256_and_si256(v, _mm256_set1_epi8(15)); }
HWY_INLINE vi vabs8(vi v) { return _mm256_abs_epi8(v); }
// a with its bytes negated where w's are negative (zero where w's are zero).
HWY_INLINE vi vsign8(vi a, vi w) { return _mm256_sign_epi8(a, w); }
HWY_INLINE vi vhigh4(vi v) {
  return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(15));
}
HWY_INLINE vf fload_f16(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
#else
constexpr int kLanes = 16;
using vi = __m512i;
using vf = __m512;
HWY_INLINE vi vzero() { return _mm512_setzero_si512(); }
HWY_INLINE vi vload(const void* p) { return _mm512_loadu_si512(p); }
HWY_INLINE vi vset1(int32_t v) { return _mm512_set1_epi32(v); }
HWY_INLINE vi vadd(vi a, vi b) { return _mm512_add_epi32(a, b); }
HWY_INLINE vi vsub(vi a, vi b) { return _mm512_sub_epi32(a, b); }
HWY_INLINE vi vmullo(vi a, vi b) { return _mm512_mullo_epi32(a, b); }
HWY_INLINE vi vshl5(vi a) { return _mm512_slli_epi32(a, 5); }
HWY_INLINE vi vmadd16(vi a, vi b) { return _mm512_madd_epi16(a, b); }
HWY_INLINE vi vmaddubs(vi u, vi s) { return _mm512_maddubs_epi16(u, s); }
HWY_INLINE vi vones16() { return _mm512_set1_epi16(1); }
HWY_INLINE vi vadd16(vi a, vi b) { return _mm512_add_epi16(a, b); }
HWY_INLINE vf fzero() { return _mm512_setzero_ps(); }
HWY_INLINE vf fload(const float* p) { return _mm512_loadu_ps(p); }
HWY_INLINE vf fset1(float v) { return _mm512_set1_ps(v); }
HWY_INLINE vf fmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
HWY_INLINE vf ffma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
HWY_INLINE vf ffnma(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); }
HWY_INLINE vf fcvt(vi a) { return _mm512_cvtepi32_ps(a); }
HWY_INLINE void fstore(float* p, vf v) { _mm512_storeu_ps(p, v); }
HWY_INLINE vi vlow4(vi v) { return _mm512_and_si512(v, _mm512_set1_epi8(15)); }
HWY_INLINE vi vabs8(vi v) { return _mm512_abs_epi8(v); }
// a with its bytes negated where w's are negative (AVX-512 has no VPSIGNB; the grid values it is
// used with are never zero).
HWY_INLINE vi vsign8(vi a, vi w) {
  return _mm512_mask_sub_epi8(a, _mm512_movepi8_mask(w), _mm512_setzero_si512(), a);
}
HWY_INLINE vi vhigh4(vi v) {
  return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(15));
}
HWY_INLINE vf fload_f16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
#endif

constexpr bool kVnni = COSERVE_VNNI;

// acc + per lane the four products of unsigned bytes u with signed bytes s. Without VNNI the
// int16 pair sums saturate past 32767: the callers' unsigned values stay <= 63, so they cannot.
HWY_INLINE vi dot4(vi acc, vi u, vi s) {
#if COSERVE_VNNI
  return _mm512_dpbusd_epi32(acc, u, s);
#else
  return vadd(acc, vmadd16(vmaddubs(u, s), vones16()));
#endif
}
// acc + per lane a.lo * b.lo + a.hi * b.hi (int16 halves of each 32-bit lane).
HWY_INLINE vi dot2w(vi acc, vi a, vi b) {
#if COSERVE_VNNI
  return _mm512_dpwssd_epi32(acc, a, b);
#else
  return vadd(acc, vmadd16(a, b));
#endif
}
HWY_INLINE vi bcast(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return vset1(v);
}
HWY_INLINE float f16x(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
HWY_INLINE __m256i ld256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}
HWY_INLINE void st256(void* p, __m256i v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }

// One tile of kLanes weight rows, unpacked and transposed; reused (thread-local) across calls.
//   wt:   K / 4 dwords x kLanes lanes: the four unsigned values k .. k + 3 of row i at dword
//         (k / 4) * kLanes + i
//   f0:   per block x kLanes: d (all types)
//   f1:   per block x kLanes: dmin (Q2_K, Q4_K, Q5_K), the minimum m (Q4_1, Q5_1)
//   sc:   per sub-block x kLanes: the sub-block scale (Q4_K/Q5_K: 8 per block; Q2_K, Q3_K, Q6_K:
//         16); an int32 with VNNI, else the int16 pair (scale, scale) that VPMADDWD multiplies
//         int16 sums with
//   pr:   per pair x kLanes: int16 pairs multiplied with the activations' 16-value sums (Q4_K/Q5_K:
//         (m[s], m[s]); Q2_K: (m[2u], m[2u + 1]); Q3_K, Q6_K: (sc[2u], sc[2u + 1]))
//   rows: staging, kLanes rows of K unpacked values
struct lane_tile {
  uint8_t* wt = nullptr;
  float* f0 = nullptr;
  float* f1 = nullptr;
  int32_t* sc = nullptr;
  int32_t* pr = nullptr;
  uint8_t* rows = nullptr;
  int64_t k = 0;
  uint8_t* mem = nullptr;

  lane_tile() = default;
  lane_tile(const lane_tile&) = delete;
  lane_tile& operator=(const lane_tile&) = delete;
  ~lane_tile() { ::operator delete[](mem, std::align_val_t{64}); }

  void reserve(int64_t K) {
    if (K <= k) return;
    auto up = [](size_t b) { return (b + 63) / 64 * 64; };
    const size_t L = kLanes;
    const size_t s_wt = up(size_t(K) * L), s_f = up(size_t(K / 32) * L * 4),
                 s_sc = up(size_t(K / 16) * L * 4), s_pr = up(size_t(K / 32) * L * 4),
                 s_rows = up(size_t(K) * L);
    ::operator delete[](mem, std::align_val_t{64});
    mem = static_cast<uint8_t*>(
        ::operator new[](s_wt + 2 * s_f + s_sc + s_pr + s_rows, std::align_val_t{64}));
    uint8_t* p = mem;
    wt = p;
    p += s_wt;
    f0 = reinterpret_cast<float*>(p);
    p += s_f;
    f1 = reinterpret_cast<float*>(p);
    p += s_f;
    sc = reinterpret_cast<int32_t*>(p);
    p += s_sc;
    pr = reinterpret_cast<int32_t*>(p);
    p += s_pr;
    rows = p;
    k = K;
  }
};

// A sub-block scale as T.sc holds it: the int32 with VNNI, else the int16 pair (scale, scale).
HWY_INLINE int32_t lane_scale(int v) {
  return kVnni ? int32_t(v) : int32_t(uint32_t(uint16_t(int16_t(v))) * 0x10001u);
}

// The unpack_* functions below write row i (of the tile) of their types from w: its K values to
// dst (T.rows' row i) and its scales to T's per-block and per-sub-block arrays.

// Q4_1, Q5_0, Q5_1: unsigned values, nibbles (0..15) with the fifth bit for Q5 (0..31); f1 the
// minimum.
HWY_INLINE void unpack_q4_1_q5(dtype t, const uint8_t* w, int64_t K, int i, lane_tile& T,
                               uint8_t* dst) {
  const __m256i m4 = _mm256_set1_epi8(15);
  const bool five = t != dtype::q4_1, min = t != dtype::q5_0;
  const size_t bb = dtype_block_bytes(t), qh_at = min ? 4 : 2, qs_at = five ? qh_at + 4 : 4;
  for (int64_t b = 0; b < K / 32; ++b, w += bb) {
    T.f0[b * kLanes + i] = f16x(w);
    T.f1[b * kLanes + i] = min ? f16x(w + 2) : 0.0f;
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + qs_at));
    __m256i v = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), m4);
    if (five)
      v = _mm256_or_si256(v, _mm256_and_si256(x86::bits_to_bytes(w + qh_at), _mm256_set1_epi8(16)));
    st256(dst + 32 * b, v);
  }
}

// IQ4_NL, IQ4_XS: the grid values as int8 (-127..113, never 0: the kernels take |w| times a with
// w's sign); f0 d; IQ4_XS: per 32 values its scale ls - 32 in T.sc.
HWY_INLINE void unpack_iq4(dtype t, const uint8_t* w, int64_t K, int i, lane_tile& T,
                           uint8_t* dst) {
  const __m256i m4 = _mm256_set1_epi8(15);
  const __m256i grid = _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(k_iq4nl_values)));
  auto values = [&](const uint8_t* qs, uint8_t* o) HWY_ATTR {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    st256(o, _mm256_shuffle_epi8(
                 grid, _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), m4)));
  };
  if (t != dtype::iq4_xs) {
    for (int64_t b = 0; b < K / 32; ++b, w += 18) {
      T.f0[b * kLanes + i] = f16x(w);
      values(w + 2, dst + 32 * b);
    }
    return;
  }
  for (int64_t b = 0; b < K / 256; ++b, w += 136) {
    T.f0[b * kLanes + i] = f16x(w);
    for (int s = 0; s < 8; ++s) {
      const int sc = iq4xs_scale(w, s) - 32;
      T.sc[(b * 8 + s) * kLanes + i] = lane_scale(sc);
      values(w + 8 + 16 * s, dst + 256 * b + 32 * s);
    }
  }
}

// Q2_K, Q3_K: unsigned values (Q2_K 0..3, Q3_K q + 4 = 0..7), 16 scales per block (Q3_K signed),
// and the pairs the 16-value activation sums meet: Q2_K's mins, Q3_K's scales (offset 4).
HWY_INLINE void unpack_q2_k_q3_k(dtype t, const uint8_t* w, int64_t K, int i, lane_tile& T,
                                 uint8_t* dst) {
  const __m256i m3 = _mm256_set1_epi8(3);
  const bool three = t == dtype::q3_k;
  const size_t bb = three ? 110 : 84;
  const __m256i one = _mm256_set1_epi8(1);
  for (int64_t b = 0; b < K / 256; ++b, w += bb) {
    T.f0[b * kLanes + i] = f16x(three ? w + 108 : w + 80);
    T.f1[b * kLanes + i] = three ? 0.0f : f16x(w + 82);
    int16_t sc[16], pr[16];
    for (int g = 0; g < 16; ++g) {
      sc[g] = int16_t(three ? q3k_scale(w + 96, g) - 32 : (w[g] & 15));
      pr[g] = three ? sc[g] : int16_t(w[g] >> 4);
      T.sc[(b * 16 + g) * kLanes + i] = lane_scale(sc[g]);
    }
    for (int u = 0; u < 8; ++u)
      T.pr[(b * 8 + u) * kLanes + i] =
          int32_t(uint32_t(uint16_t(pr[2 * u])) | (uint32_t(uint16_t(pr[2 * u + 1])) << 16));
    const uint8_t* qs = three ? w + 32 : w + 16;
    const __m256i hm = three ? ld256(w) : _mm256_setzero_si256();
    uint8_t* o = dst + 256 * b;
    for (int hh = 0; hh < 2; ++hh) {
      const __m256i l = ld256(qs + 32 * hh);
      for (int s = 0; s < 4; ++s) {
        __m256i q = _mm256_and_si256(_mm256_srl_epi16(l, _mm_cvtsi32_si128(2 * s)), m3);
        if (three)
          q = _mm256_or_si256(
              q,
              _mm256_slli_epi16(
                  _mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(4 * hh + s)), one), 2));
        st256(o + 128 * hh + 32 * s, q);
      }
    }
  }
}

// Q8_0: the values + 128 (unsigned).
HWY_INLINE void unpack_q8_0(const uint8_t* w, int64_t K, int i, lane_tile& T, uint8_t* dst) {
  const __m256i flip = _mm256_set1_epi8(char(0x80));
  for (int64_t b = 0; b < K / 32; ++b, w += 34) {
    T.f0[b * kLanes + i] = f16x(w);
    st256(dst + 32 * b, _mm256_xor_si256(ld256(w + 2), flip));
  }
}

// Q4_0: the nibbles (0..15), low ones first.
HWY_INLINE void unpack_q4_0(const uint8_t* w, int64_t K, int i, lane_tile& T, uint8_t* dst) {
  const __m128i m4x = _mm_set1_epi8(15);
  for (int64_t b = 0; b < K / 32; ++b, w += 18) {
    T.f0[b * kLanes + i] = f16x(w);
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 32 * b), _mm_and_si128(raw, m4x));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 32 * b + 16),
                     _mm_and_si128(_mm_srli_epi16(raw, 4), m4x));
  }
}

// Q4_K, Q5_K: 4- or 5-bit unsigned values, 8 sub-block scales and mins per block; f1 dmin.
HWY_INLINE void unpack_q4_k_q5_k(dtype t, const uint8_t* w, int64_t K, int i, lane_tile& T,
                                 uint8_t* dst) {
  const __m256i m4 = _mm256_set1_epi8(15);
  const bool five = t == dtype::q5_k;
  const size_t bb = five ? 176 : 144;
  const __m256i k16 = _mm256_set1_epi8(16);
  for (int64_t b = 0; b < K / 256; ++b, w += bb) {
    T.f0[b * kLanes + i] = f16x(w);
    T.f1[b * kLanes + i] = f16x(w + 2);
    for (int s = 0; s < 8; ++s) {
      uint8_t sc, mn;
      k_scale_min(w + 4, s, sc, mn);
      T.sc[(b * 8 + s) * kLanes + i] = kVnni ? int32_t(sc) : int32_t(uint32_t(sc) * 0x10001u);
      T.pr[(b * 8 + s) * kLanes + i] = int32_t(uint32_t(mn) | (uint32_t(mn) << 16));
    }
    const uint8_t* qs = five ? w + 48 : w + 16;
    const __m256i hv = five ? ld256(w + 16) : _mm256_setzero_si256();
    uint8_t* o = dst + 256 * b;
    for (int c = 0; c < 4; ++c) {
      const __m256i v = ld256(qs + 32 * c);
      __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      if (five) {
        const __m256i b0 = _mm256_set1_epi8(char(1 << (2 * c))),
                      b1 = _mm256_set1_epi8(char(1 << (2 * c + 1)));
        lo = _mm256_or_si256(
            lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hv, b0), b0), k16));
        hi = _mm256_or_si256(
            hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hv, b1), b1), k16));
      }
      st256(o + 64 * c, lo);
      st256(o + 64 * c + 32, hi);
    }
  }
}

// Q6_K: 6-bit unsigned values, 16 signed scales per block and their pairs.
HWY_INLINE void unpack_q6_k(const uint8_t* w, int64_t K, int i, lane_tile& T, uint8_t* dst) {
  const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
  for (int64_t b = 0; b < K / 256; ++b, w += 210) {
    const auto* scales = reinterpret_cast<const int8_t*>(w + 192);
    T.f0[b * kLanes + i] = f16x(w + 208);
    for (int s = 0; s < 16; ++s)
      T.sc[(b * 16 + s) * kLanes + i] =
          kVnni ? int32_t(scales[s]) : int32_t(uint32_t(uint16_t(scales[s])) * 0x10001u);
    for (int u = 0; u < 8; ++u)
      T.pr[(b * 8 + u) * kLanes + i] = int32_t(uint32_t(uint16_t(scales[2 * u])) |
                                               (uint32_t(uint16_t(scales[2 * u + 1])) << 16));
    uint8_t* o = dst + 256 * b;
    for (int n = 0; n < 2; ++n) {
      const __m256i l0 = ld256(w + 64 * n), l1 = ld256(w + 64 * n + 32),
                    h = ld256(w + 128 + 32 * n);
      auto hi2 = [&](int shift) {
        return _mm256_slli_epi16(
            _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(shift)), m3), 4);
      };
      st256(o + 128 * n, _mm256_or_si256(_mm256_and_si256(l0, m4), hi2(0)));
      st256(o + 128 * n + 32, _mm256_or_si256(_mm256_and_si256(l1, m4), hi2(2)));
      st256(o + 128 * n + 64,
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), hi2(4)));
      st256(o + 128 * n + 96,
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), hi2(6)));
    }
  }
}

// Unpacks row i (of the tile) of type t at w into T.rows and the scale arrays.
void unpack_row(dtype t, const uint8_t* w, int64_t K, int i, lane_tile& T) {
  uint8_t* dst = T.rows + size_t(i) * size_t(K);
  switch (t) {
    case dtype::q4_1:
    case dtype::q5_0:
    case dtype::q5_1:
      return unpack_q4_1_q5(t, w, K, i, T, dst);
    case dtype::iq4_nl:
    case dtype::iq4_xs:
      return unpack_iq4(t, w, K, i, T, dst);
    case dtype::q2_k:
    case dtype::q3_k:
      return unpack_q2_k_q3_k(t, w, K, i, T, dst);
    case dtype::q8_0:
      return unpack_q8_0(w, K, i, T, dst);
    case dtype::q4_0:
      return unpack_q4_0(w, K, i, T, dst);
    case dtype::q4_k:
    case dtype::q5_k:
      return unpack_q4_k_q5_k(t, w, K, i, T, dst);
    case dtype::q6_k:
      return unpack_q6_k(w, K, i, T, dst);
    default:
      break;
  }
}

// T.rows (kLanes rows of K bytes) to T.wt: dword t of row i to dword t * kLanes + i, by 8 x 8
// dword transposes.
void transpose_tile(lane_tile& T, int64_t K) {
  const int64_t ndw = K / 4;
  for (int h = 0; h < kLanes / 8; ++h)
    for (int64_t t0 = 0; t0 < ndw; t0 += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i)
        r[i] = _mm256_castsi256_ps(ld256(T.rows + size_t(8 * h + i) * size_t(K) + size_t(4 * t0)));
      x86::transpose8(r);
      for (int k = 0; k < 8; ++k)
        st256(T.wt + (size_t(t0 + k) * kLanes + size_t(8 * h)) * 4, _mm256_castps_si256(r[k]));
    }
}

void pack_tile(dtype t, const uint8_t* w, size_t row_bytes, int nr, int64_t K, lane_tile& T) {
  T.reserve(K);
  for (int i = 0; i < nr; ++i) unpack_row(t, w + size_t(i) * row_bytes, K, i, T);
  if (nr < kLanes) {
    // Missing rows: zero values and scales, so their lanes compute zeros that are never stored.
    for (int i = nr; i < kLanes; ++i) std::memset(T.rows + size_t(i) * size_t(K), 0, size_t(K));
    const int64_t nb = uses_q8k(t) ? K / 256 : K / 32;
    for (int64_t b = 0; b < nb; ++b)
      for (int i = nr; i < kLanes; ++i) T.f0[b * kLanes + i] = T.f1[b * kLanes + i] = 0.0f;
    if (uses_q8k(t)) {
      for (int64_t s = 0; s < K / 16; ++s)
        for (int i = nr; i < kLanes; ++i) T.sc[s * kLanes + i] = 0;
      for (int64_t s = 0; s < K / 32; ++s)
        for (int i = nr; i < kLanes; ++i) T.pr[s * kLanes + i] = 0;
    }
  }
  transpose_tile(T, K);
}

HWY_INLINE const uint8_t* wvec(const lane_tile& T, int64_t dword) {
  return T.wt + size_t(dword) * kLanes * 4;
}

// The block-32 types: per block, the integer sums of (value + off) * a, less off * sum(a) (Q8_0
// stored + 128, Q4_0's 8, Q5_0's 16); kMin (Q4_1, Q5_1): plus the minimum (f1) times sum(a).
// kSigned (IQ4_NL): the tile holds int8 values; |w| times a with w's sign.
template <int R, bool kMin = false, bool kSigned = false>
void lanes_32(const lane_tile& T, int32_t off, const q8_block* const* a, int64_t nb, float* out) {
  vf acc[R];
  for (int r = 0; r < R; ++r) acc[r] = fzero();
  for (int64_t b = 0; b < nb; ++b) {
    vi d[R];
    for (int r = 0; r < R; ++r) d[r] = vzero();
    for (int k = 0; k < 8; ++k) {
      const vi w = vload(wvec(T, b * 8 + k));
      if constexpr (kSigned) {
        const vi aw = vabs8(w);
        for (int r = 0; r < R; ++r) d[r] = dot4(d[r], aw, vsign8(bcast(a[r][b].q + 4 * k), w));
      } else {
        for (int r = 0; r < R; ++r) d[r] = dot4(d[r], w, bcast(a[r][b].q + 4 * k));
      }
    }
    const vf dw = fload(T.f0 + b * kLanes);
    for (int r = 0; r < R; ++r) {
      const vi s = vsub(d[r], vset1(off * a[r][b].s));
      acc[r] = ffma(fcvt(s), fmul(dw, fset1(a[r][b].d)), acc[r]);
      if constexpr (kMin)
        acc[r] = ffma(fload(T.f1 + b * kLanes), fset1(a[r][b].d * float(a[r][b].s)), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) fstore(out + r * kLanes, acc[r]);
}

// is[r] + sc * (the products of dword steps k0 .. k0 + n of the weight tile with activations
// q[r] + 4 * (k - k0)), per lane. VNNI: VPDPBUSD sums, times the int32 scale. Without it the
// VPMADDUBSW pair sums are added in int16 over the n steps, then VPMADDWD multiplies them with
// the (scale, scale) pair and widens: the caller's n keeps n * 2 * max value * 127 below 2^15, so
// neither the pairs nor the sums saturate and the result is the VNNI path's exactly.
// kSigned: int8 tile values, |w| times q with w's sign.
template <int R, int N, bool kSigned = false>
HWY_INLINE void scaled_dots(const lane_tile& T, int64_t k0, const int8_t* const* q, vi scv,
                            vi* is) {
  vi d[R];
  for (int r = 0; r < R; ++r) d[r] = vzero();
  for (int k = 0; k < N; ++k) {
    const vi wv = vload(wvec(T, k0 + k));
    const vi w = kSigned ? vabs8(wv) : wv;
    for (int r = 0; r < R; ++r) {
      const vi x = kSigned ? vsign8(bcast(q[r] + 4 * k), wv) : bcast(q[r] + 4 * k);
      d[r] = kVnni ? dot4(d[r], w, x) : vadd16(d[r], vmaddubs(w, x));
    }
  }
  for (int r = 0; r < R; ++r) is[r] = vadd(is[r], kVnni ? vmullo(d[r], scv) : vmadd16(d[r], scv));
}

// Q4_K / Q5_K: d * sum_s sc[s] * (q . a)_s - dmin * sum_s m[s] * (sum of a)_s, per block. Fold:
// dword steps summed in int16 without VNNI (Q4_K values <= 15: all 8 of a sub-block; Q5_K <= 31:
// 4).
template <int R, int Fold>
void lanes_k45(const lane_tile& T, const q8k_block* const* a, int64_t nb, float* out) {
  constexpr int N = kVnni ? 8 : Fold;
  vf acc[R];
  for (int r = 0; r < R; ++r) acc[r] = fzero();
  for (int64_t b = 0; b < nb; ++b) {
    vi is[R], ms[R];
    for (int r = 0; r < R; ++r) is[r] = ms[r] = vzero();
    for (int s = 0; s < 8; ++s) {
      const int64_t sb = b * 8 + s;
      const vi scv = vload(T.sc + sb * kLanes);
      for (int k0 = 0; k0 < 8; k0 += N) {
        const int8_t* q[R];
        for (int r = 0; r < R; ++r) q[r] = a[r][b].q + 32 * s + 4 * k0;
        scaled_dots<R, N>(T, sb * 8 + k0, q, scv, is);
      }
    }
    // The mins in a loop of their own: fewer vectors live at once (AVX2 has 16 registers).
    for (int s = 0; s < 8; ++s) {
      const vi mp = vload(T.pr + (b * 8 + s) * kLanes);
      for (int r = 0; r < R; ++r) ms[r] = dot2w(ms[r], mp, bcast(a[r][b].bsums + 2 * s));
    }
    const vf dv = fload(T.f0 + b * kLanes), mv = fload(T.f1 + b * kLanes);
    for (int r = 0; r < R; ++r) {
      const vf ad = fset1(a[r][b].d);
      acc[r] = ffma(fcvt(is[r]), fmul(dv, ad), acc[r]);
      acc[r] = ffnma(fcvt(ms[r]), fmul(mv, ad), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) fstore(out + r * kLanes, acc[r]);
}

// Q6_K: d * (sum_t sc[t] * (q . a)_t - 32 * sum_t sc[t] * (sum of a)_t), 16-value sub-blocks t;
// Q3_K the same with offset 4; Q2_K: d * sum_t sc[t] * (q . a)_t - dmin * sum_t m[t] * (sum of
// a)_t.
template <int R, dtype kT = dtype::q6_k>
void lanes_q6k(const lane_tile& T, const q8k_block* const* a, int64_t nb, float* out) {
  vf acc[R];
  for (int r = 0; r < R; ++r) acc[r] = fzero();
  for (int64_t b = 0; b < nb; ++b) {
    vi is[R], cs[R];
    for (int r = 0; r < R; ++r) is[r] = cs[r] = vzero();
    for (int t = 0; t < 16; ++t) {
      // Values <= 63: without VNNI, two dword steps per int16 sum (Q2_K/Q3_K <= 7: four).
      constexpr int N = kVnni || kT != dtype::q6_k ? 4 : 2;
      const vi scv = vload(T.sc + (b * 16 + t) * kLanes);
      for (int k0 = 0; k0 < 4; k0 += N) {
        const int8_t* q[R];
        for (int r = 0; r < R; ++r) q[r] = a[r][b].q + 16 * t + 4 * k0;
        scaled_dots<R, N>(T, b * 64 + t * 4 + k0, q, scv, is);
      }
    }
    for (int u = 0; u < 8; ++u) {
      const vi pv = vload(T.pr + (b * 8 + u) * kLanes);
      for (int r = 0; r < R; ++r) cs[r] = dot2w(cs[r], pv, bcast(a[r][b].bsums + 2 * u));
    }
    const vf dv = fload(T.f0 + b * kLanes);
    for (int r = 0; r < R; ++r) {
      if constexpr (kT == dtype::q6_k) {
        acc[r] = ffma(fcvt(vsub(is[r], vshl5(cs[r]))), fmul(dv, fset1(a[r][b].d)), acc[r]);
      } else if constexpr (kT == dtype::q3_k) {
        acc[r] = ffma(fcvt(vsub(is[r], vadd(vadd(cs[r], cs[r]), vadd(cs[r], cs[r])))),
                      fmul(dv, fset1(a[r][b].d)), acc[r]);
      } else {
        const vf ad = fset1(a[r][b].d);
        acc[r] = ffma(fcvt(is[r]), fmul(dv, ad), acc[r]);
        acc[r] = ffnma(fcvt(cs[r]), fmul(fload(T.f1 + b * kLanes), ad), acc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) fstore(out + r * kLanes, acc[r]);
}

// IQ4_XS: d * sum_s sc[s] * (w . a)_s over 32-value sub-blocks s, the int8 grid values w taken as
// |w| times a with w's sign. Without VNNI each dword step's int16 pair sums (up to 2 * 127 * 127)
// are widened on their own (N = 1).
template <int R>
void lanes_iq4xs(const lane_tile& T, const q8k_block* const* a, int64_t nb, float* out) {
  constexpr int N = kVnni ? 8 : 1;
  vf acc[R];
  for (int r = 0; r < R; ++r) acc[r] = fzero();
  for (int64_t b = 0; b < nb; ++b) {
    vi is[R];
    for (int r = 0; r < R; ++r) is[r] = vzero();
    for (int s = 0; s < 8; ++s) {
      const int64_t sb = b * 8 + s;
      const vi scv = vload(T.sc + sb * kLanes);
      for (int k0 = 0; k0 < 8; k0 += N) {
        const int8_t* q[R];
        for (int r = 0; r < R; ++r) q[r] = a[r][b].q + 32 * s + 4 * k0;
        scaled_dots<R, N, true>(T, sb * 8 + k0, q, scv, is);
      }
    }
    const vf dv = fload(T.f0 + b * kLanes);
    for (int r = 0; r < R; ++r) acc[r] = ffma(fcvt(is[r]), fmul(dv, fset1(a[r][b].d)), acc[r]);
  }
  for (int r = 0; r < R; ++r) fstore(out + r * kLanes, acc[r]);
}

template <int R>
void lanes_rows(dtype t, const lane_tile& T, const void* const* act, int64_t nb, float* out) {
  switch (t) {
    case dtype::q8_0:
      lanes_32<R>(T, 128, reinterpret_cast<const q8_block* const*>(act), nb, out);
      break;
    case dtype::q4_0:
      lanes_32<R>(T, 8, reinterpret_cast<const q8_block* const*>(act), nb, out);
      break;
    case dtype::q4_k:
      lanes_k45<R, 8>(T, reinterpret_cast<const q8k_block* const*>(act), nb, out);
      break;
    case dtype::q5_k:
      lanes_k45<R, 4>(T, reinterpret_cast<const q8k_block* const*>(act), nb, out);
      break;
    case dtype::q6_k:
      lanes_q6k<R>(T, reinterpret_cast<const q8k_block* const*>(act), nb, out);
      break;
    case dtype::q4_1:
      lanes_32<R, true>(T, 0, reinterpret_cast<const q8_block* const*>(act), nb, out);
      break;
    case dtype::q5_0:
      lanes_32<R>(T, 16, reinterpret_cast<const q8_block* const*>(act), nb, out);
      break;
    case dtype::q5_1:
      lanes_32<R, true>(T, 0, reinterpret_cast<const q8_block* const*>(act), nb, out);
      break;
    case dtype::q2_k:
      lanes_q6k<R, dtype::q2_k>(T, reinterpret_cast<const q8k_block* const*>(act), nb, out);
      break;
    case dtype::q3_k:
      lanes_q6k<R, dtype::q3_k>(T, reinterpret_cast<const q8k_block* const*>(act), nb, out);
      break;
    case dtype::iq4_nl:
      lanes_32<R, false, true>(T, 0, reinterpret_cast<const q8_block* const*>(act), nb, out);
      break;
    case dtype::iq4_xs:
      lanes_iq4xs<R>(T, reinterpret_cast<const q8k_block* const*>(act), nb, out);
      break;
    default:
      break;
  }
}
// Q4_0 from the repacked tiles (quant.hpp, pack_q4_0_tiles): out[r * 16 + i] for the 16 rows of
// the tile and R activation rows. The nibbles are split in registers (no unpacked copy), the 16
// rows' scales come from one f16 vector load per block; with 8 lanes (AVX2) a tile is two halves.
// Per block the same integer sums and fp32 operations as lanes_32, so the results are those of
// the unpacked path.
template <int R>
void packed_q4_0(const uint8_t* tile, const q8_block* const* a, int64_t nb, float* out) {
  constexpr int kHalves = int(k_q4_0_tile_rows) / kLanes;
  vf acc[kHalves][R];
  for (int h = 0; h < kHalves; ++h)
    for (int r = 0; r < R; ++r) acc[h][r] = fzero();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = tile + size_t(b) * 288;
    for (int h = 0; h < kHalves; ++h) {
      vi d[R];
      for (int r = 0; r < R; ++r) d[r] = vzero();
      for (int g = 0; g < 4; ++g) {
        const vi v = vload(rec + 32 + 64 * g + 4 * kLanes * h);
        const vi lo = vlow4(v), hi = vhigh4(v);
        for (int r = 0; r < R; ++r) {
          d[r] = dot4(d[r], lo, bcast(a[r][b].q + 4 * g));
          d[r] = dot4(d[r], hi, bcast(a[r][b].q + 16 + 4 * g));
        }
      }
      const vf dw = fload_f16(rec + 2 * kLanes * h);
      for (int r = 0; r < R; ++r) {
        const vi s = vsub(d[r], vset1(8 * a[r][b].s));
        acc[h][r] = ffma(fcvt(s), fmul(dw, fset1(a[r][b].d)), acc[h][r]);
      }
    }
  }
  for (int h = 0; h < kHalves; ++h)
    for (int r = 0; r < R; ++r) fstore(out + r * k_q4_0_tile_rows + h * kLanes, acc[h][r]);
}
#endif  // x86

// Groups of up to 4 activation rows (M rows, act_stride bytes apart) against one tile of W weight
// rows starting at j0, nr of them real: kernel(R, act, res) fills res[i * W + l] for the group's R
// rows; y[(m + i) * ldy + j0 + l] gets them for l < nr (or adds them).
template <int64_t W, typename Kernel>
void row_groups(const uint8_t* act0, size_t act_stride, int64_t M, int64_t j0, int nr, float* y,
                int64_t ldy, bool accumulate, const Kernel& kernel) {
  alignas(64) float res[4 * W];
  for (int64_t m = 0; m < M; m += 4) {
    const int r = int(std::min<int64_t>(4, M - m));
    const void* act[4];
    for (int i = 0; i < r; ++i) act[i] = act0 + size_t(m + i) * act_stride;
    switch (r) {
      case 4:
        kernel(std::integral_constant<int, 4>{}, act, res);
        break;
      case 3:
        kernel(std::integral_constant<int, 3>{}, act, res);
        break;
      case 2:
        kernel(std::integral_constant<int, 2>{}, act, res);
        break;
      default:
        kernel(std::integral_constant<int, 1>{}, act, res);
        break;
    }
    for (int i = 0; i < r; ++i) {
      float* yr = y + (m + i) * ldy + j0;
      const float* v = res + i * W;
      if (accumulate)
        for (int l = 0; l < nr; ++l) yr[l] += v[l];
      else
        for (int l = 0; l < nr; ++l) yr[l] = v[l];
    }
  }
}

// See quant.hpp (matmul_quantized_packed).
bool matmul_packed_impl(const void* xq, int64_t M, const weight_ref* wr, int64_t n, float* y,
                        int64_t ldy, bool accumulate) {
#ifdef COSERVE_LANE_GEMM
  const weight_ref& w = *wr;
  if (w.type != dtype::q4_0 || !w.packed) return false;
  const int64_t K = w.cols, nb = K / 32;
  const size_t tile_bytes = q4_0_tile_bytes(K), act_stride = sizeof(q8_block) * size_t(nb);
  const auto* act0 = static_cast<const uint8_t*>(xq);
  const auto* tiles = static_cast<const uint8_t*>(w.packed);
  constexpr int64_t kT = k_q4_0_tile_rows;
  for (int64_t j0 = 0; j0 < n; j0 += kT) {
    const uint8_t* tile = tiles + size_t(j0 / kT) * tile_bytes;
    row_groups<kT>(act0, act_stride, M, j0, int(std::min<int64_t>(kT, n - j0)), y, ldy, accumulate,
                   [&](auto R, const void* const* act, float* res) HWY_ATTR {
                     packed_q4_0<decltype(R)::value>(
                         tile, reinterpret_cast<const q8_block* const*>(act), nb, res);
                   });
  }
  return true;
#else
  (void)xq, (void)M, (void)wr, (void)n, (void)y, (void)ldy, (void)accumulate;
  return false;
#endif
}

// See quant.hpp (matmul_quantized); false when this target has no such kernels for w.type.
bool matmul_lanes_impl(const void* xq, int64_t M, const weight_ref* wr, int64_t n, float* y,
                       int64_t ldy, bool accumulate) {
#ifdef COSERVE_LANE_GEMM
  const weight_ref& w = *wr;
  // Without VNNI the products are int16 pair sums: Q8_0's +128 bytes could saturate them.
  if (!kVnni && w.type == dtype::q8_0) return false;
  if (!dtype_is_quantized(w.type)) return false;
  const int64_t K = w.cols;
  const bool k_type = uses_q8k(w.type);
  const int64_t nb = K / (k_type ? 256 : 32);
  const size_t row_bytes = w.row_bytes();
  const size_t act_stride = (k_type ? sizeof(q8k_block) : sizeof(q8_block)) * size_t(nb);
  const auto* act0 = static_cast<const uint8_t*>(xq);
  const auto* base = static_cast<const uint8_t*>(w.data);
  thread_local lane_tile T;
  for (int64_t j0 = 0; j0 < n; j0 += kLanes) {
    const int nr = int(std::min<int64_t>(kLanes, n - j0));
    pack_tile(w.type, base + size_t(j0) * row_bytes, row_bytes, nr, K, T);
    row_groups<kLanes>(act0, act_stride, M, j0, nr, y, ldy, accumulate,
                       [&](auto R, const void* const* act, float* res)
                           HWY_ATTR { lanes_rows<decltype(R)::value>(w.type, T, act, nb, res); });
  }
  return true;
#else
  (void)xq, (void)M, (void)wr, (void)n, (void)y, (void)ldy, (void)accumulate;
  return false;
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace coserve
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace coserve {

HWY_EXPORT(matmul_lanes_impl);
HWY_EXPORT(matmul_packed_impl);

bool matmul_quantized_packed(const void* xq, int64_t M, const weight_ref& w, int64_t n, float* y,
                             int64_t ldy, bool accumulate) {
  return HWY_DYNAMIC_DISPATCH(matmul_packed_impl)(xq, M, &w, n, y, ldy, accumulate);
}

bool matmul_quantized_lanes(const void* xq, int64_t M, const weight_ref& w, int64_t n, float* y,
                            int64_t ldy, bool accumulate) {
  return HWY_DYNAMIC_DISPATCH(matmul_lanes_impl)(xq, M, &w, n, y, ldy, accumulate);
}

}  // namespace coserve
#endif  // HWY_ONCE
